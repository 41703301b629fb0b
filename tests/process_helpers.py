"""What the command-line and replay tests share: running a command as a shell pipe would."""

from __future__ import annotations

import subprocess


def read_then_close(command: list[str]) -> tuple[int, str]:
    """Run ``command``, read 10 bytes of its output, close it (``| head``): (code, stderr)."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    return proc.returncode, err
