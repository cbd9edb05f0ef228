"""Datasets: opening one (or several as one, a collection) and reading any cells; writing one, manifest last."""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
