"""Debian's headless Chromium for the tests that look at a page: the dashboard, the site.

Chromium comes from the Debian package (installed here when missing, as root, like
redis-server for the store tests); Playwright only drives it and never downloads a
browser.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

#: How the tests start Chromium: headless, nothing fetched from the network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium() -> str:
    """The path of Debian's chromium, installed first when it is missing (as root)."""
    found = shutil.which("chromium") or shutil.which("chromium", path="/usr/bin")
    if found:
        return found
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            subprocess.run(command, env=env, check=False, capture_output=True, timeout=900)
        found = shutil.which("chromium", path="/usr/bin")
        if found:
            return found
    pytest.fail("chromium is not installed and could not be (apt-get install chromium, as root)")
