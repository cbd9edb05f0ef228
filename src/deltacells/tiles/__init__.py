"""Tiles: count blocks checked and encoded into stored tiles; stored tiles fetched, checked and decoded."""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
