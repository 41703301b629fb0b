"""Work that parallel workers share: done by the first worker that needs it, read by the rest.

A module- or session-scoped fixture runs once per worker; for a build that takes half a
minute of CPU (the docs site, a cold mypy), four workers would do it four times. ``once``
keeps its result in the directory all workers of one run share, under a lock: the first
worker builds, the others wait for it and read what it wrote. Run in one process, it is
simply the build, in the session's own temporary directory.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path

import pytest


def once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The directory ``name`` that ``build`` filled, built by one worker of this run.

    ``build`` receives an empty directory and fills it; it raises to fail (then every
    worker that asks builds again, and fails as loudly). A directory is only ever seen
    complete: it is built under another name and renamed when ``build`` returns.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base  # xdist: pytest-N/
    done = shared / f"once-{name}"
    with (shared / f"once-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_dir():
            building = shared / f"once-{name}.building"
            building.mkdir(exist_ok=True)
            build(building)
            building.rename(done)
    return done
