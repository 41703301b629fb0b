"""Figures for ``simulate`` and ``tune``: matplotlib (extra ``plot``), headless, deterministic.

Drawing never touches pyplot or a display: a bare :class:`matplotlib.figure.Figure`
rendered by the Agg (PNG) or SVG canvas. SVG output is byte-for-byte reproducible with
the same matplotlib: element ids are salted with a constant (``svg.hashsalt``), the date
is left out of the metadata, and text stays text (``svg.fonttype = none``, so the numbers
in a figure can be searched and tested). PNG output leaves out the ``Software`` stamp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from toolbreaker._extras import require
from toolbreaker.errors import TraceError

__all__ = ["FIGURE_SUFFIXES", "MISSING", "check_output", "draw", "load_matplotlib"]

#: The figure formats ``--out`` accepts.
FIGURE_SUFFIXES: Final = (".svg", ".png")
_RC: Final = {
    "svg.hashsalt": "toolbreaker",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
}
_METADATA: Final[dict[str, dict[str, Any]]] = {
    ".svg": {"Date": None},
    ".png": {"Software": None},
}


def check_output(path: str, flag: str, suffixes: Iterable[str] = FIGURE_SUFFIXES) -> Path:
    """Check an output file before any work: a known suffix, new, in an existing folder."""
    target = Path(path)
    allowed = tuple(suffixes)
    if target.suffix.lower() not in allowed:
        raise TraceError(f"{flag}: the file name must end in {' or '.join(allowed)}", file=path)
    if target.exists() or target.is_symlink():
        raise TraceError(f"{flag} would overwrite an existing file", file=path)
    if not target.parent.is_dir():
        raise TraceError(f"{flag}: the parent directory does not exist", file=path)
    return target


MISSING: Final = "drawing a figure needs matplotlib: pip install 'toolbreaker[plot]'"


def load_matplotlib() -> Any:
    """The ``matplotlib`` module; ImportError (say :data:`MISSING`) without the extra."""
    module = require("matplotlib", "plot")
    require("matplotlib.figure", "plot")
    return module


def draw(
    matplotlib: Any, target: Path, build: Callable[[Any], None], size: tuple[float, float]
) -> None:
    """Build a bare figure (no pyplot, no display) with ``build`` and write it to ``target``.

    ``target`` is a new file (opened exclusively); its suffix picks SVG or PNG.
    """
    figure_module = require("matplotlib.figure", "plot")
    suffix = target.suffix.lower()
    with matplotlib.rc_context(_RC):
        figure = figure_module.Figure(figsize=size, layout="constrained")
        build(figure)
        try:
            with target.open("xb") as handle:
                figure.savefig(handle, format=suffix[1:], metadata=_METADATA[suffix], dpi=150)
        except OSError as exc:
            raise TraceError(
                f"cannot write the figure: {exc.strerror or exc}", file=str(target)
            ) from None
