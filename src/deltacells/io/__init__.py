"""AnnData and scanpy integration: read_deltacells, write_deltacells, and the lazy X.

The names load their modules (and anndata) on first use, so that importing the package stays cheap.
"""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
