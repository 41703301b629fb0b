"""A free TCP port on 127.0.0.1, for the tests' own servers and for "nothing listens here"."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listened on a moment ago (the probe socket is closed on return)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
