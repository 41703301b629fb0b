"""Objects that are never "nothing" are true: ``registry or Registry.from_toml(...)`` is safe.

``Registry`` counts its breakers (``len``), so it used to be false while it held none:
``registry or Registry.from_toml(path)`` quietly swapped a store-backed registry for a
fresh in-memory one. A public class with a length that is not a collection of values
(a mapping or a sequence, whose emptiness means something) says it is always true.
"""

from __future__ import annotations

import collections.abc
import inspect

import toolbreaker
import toolbreaker.instrumentation.stream
import toolbreaker.runtime
import toolbreaker.stores
import toolbreaker.testing
from toolbreaker import Registry
from toolbreaker.stores import SQLiteStore


def test_an_empty_registry_is_true(tmp_path):
    """A store-backed registry with no breaker yet is kept by ``or``."""
    store = SQLiteStore(tmp_path / "breakers.db")
    try:
        shared = Registry(store=store)
        assert len(shared) == 0
        assert bool(shared) is True
        sheet = tmp_path / "breakers.toml"
        sheet.write_text("[defaults]\ntimeout_ms = 1000\n", encoding="utf-8")
        chosen = shared or Registry.from_toml(sheet)
        assert chosen is shared
        assert chosen.store is store
    finally:
        store.close()


def test_every_public_class_with_a_length_says_how_it_is_true():
    """A public class with ``__len__`` is a mapping or a sequence, or defines ``__bool__``:
    nothing that is never empty in a boolean sense is false for holding nothing yet."""
    modules = (
        toolbreaker,
        toolbreaker.runtime,
        toolbreaker.stores,
        toolbreaker.testing,
        toolbreaker.instrumentation.stream,
    )
    classes = {
        obj
        for module in modules
        for obj in (getattr(module, name) for name in module.__all__)
        if inspect.isclass(obj)
    }
    collections_ = (collections.abc.Mapping, collections.abc.Sequence, collections.abc.Set)
    sized = [c for c in classes if hasattr(c, "__len__") and not issubclass(c, collections_)]
    assert Registry in sized
    assert [c.__name__ for c in sized if "__bool__" not in vars(c)] == []
