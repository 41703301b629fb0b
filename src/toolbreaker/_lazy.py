"""Names a package re-exports, imported when first used (PEP 562).

``import toolbreaker`` loads nothing but the package itself: ``from toolbreaker import
Registry`` imports what the registry needs and no more (no run guard, no SQLite, no
asyncio before a breaker needs it). A package that re-exports names keeps their homes
in one mapping, hands it to :func:`exports` for its module ``__getattr__`` and
``__dir__``, and lists the same imports under ``if TYPE_CHECKING:`` so type checkers
and editors see every name (``tests/test_lazy_import.py`` holds the two to each other).
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a package's top)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["exports"]


def exports(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which re-exports ``homes``.

    ``homes`` maps each module to the names the package re-exports from it. A name is
    imported from its module on first use and kept in the package (later uses are plain
    attribute reads); a subpackage or module of the package is imported by its name, as
    an eager ``import`` would have bound it.
    """
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        module = home_of.get(name)
        if module is None:
            if name.startswith("__"):  # a probe for a dunder (``__wrapped__``): not a module
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home_of})

    return __getattr__, __dir__
