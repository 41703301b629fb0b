"""Every runnable example runs, offline, and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_quality import private_imports

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path):
    """The example exits 0 and prints something.

    The bound only catches a hang: CrewAI's import alone took half a minute with the two
    cores shared by several runs of the suite.
    """
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_imports_public_names_only(path: Path):
    """The example imports only public modules of toolbreaker and only names of their
    ``__all__`` (tests/test_quality.py's list)."""
    assert private_imports(path.read_text(encoding="utf-8")) == []
