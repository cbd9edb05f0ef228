"""Test helpers for code that builds on deltacells; importing them needs pytest.

:mod:`deltacells.testing.store` holds :class:`~deltacells.testing.store.StoreTests`, the
conformance suite that every :class:`~deltacells.storage.BaseStore` implementation must pass.
Nothing else in deltacells imports this package.
"""
