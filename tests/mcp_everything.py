"""The official MCP reference server, ``@modelcontextprotocol/server-everything``, from npm.

Installed once per version with npm into a cache directory the tests own
(``$TOOLBREAKER_TEST_CACHE``, else ``~/.cache/toolbreaker-tests``): npm installs into a
directory of its own, which is renamed into place, so two suites running at once never
see a half-installed server. Without npm (or without the registry) the tests that need the
server fail, saying what to install: a skipped real server would hide a broken promise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

#: The server-everything release the tests run (its tools: ``echo``,
#: ``trigger-long-running-operation``, ``get-sum`` ...).
VERSION = "2026.8.31"
PACKAGE = "@modelcontextprotocol/server-everything"


def cache_dir() -> Path:
    """Where the tests keep what they install."""
    root = os.environ.get("TOOLBREAKER_TEST_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "toolbreaker-tests"


def everything_server() -> list[str]:
    """The argv that runs server-everything over stdio (installed on first use)."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(f"node and npm are needed to run {PACKAGE} (apt-get install nodejs npm)")
    home = cache_dir() / "npm" / f"server-everything-{VERSION}"
    entry = home / "node_modules" / PACKAGE / "dist" / "index.js"
    if not entry.is_file():
        home.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
        command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(staging)]
        installed = subprocess.run(
            [*command, f"{PACKAGE}@{VERSION}"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if installed.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail(f"npm could not install {PACKAGE}@{VERSION}:\n{installed.stderr[-2000:]}")
        try:
            staging.rename(home)
        except OSError:  # another run installed it first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
    assert entry.is_file(), entry
    return [node, str(entry), "stdio"]
