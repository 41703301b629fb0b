"""What the adapter extras in pyproject.toml ask for, for CI's scripts (no other list exists).

``python .ci/extras.py check``: every framework an adapter extra names for this Python is
installed (so an adapter test that skips for a missing framework is a real absence, not a
broken install). ``python .ci/extras.py lowest``: a constraints file pinning each of those
frameworks at its lower bound. The adapters are the modules of src/toolbreaker/integrations;
each has the extra of its name (``openai_agents`` -> ``openai-agents``).
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 backport, a dependency of toolbreaker there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def adapter_requirements() -> list[Requirement]:
    """The requirements of every adapter's extra whose marker holds on this Python."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    modules = sorted(p.stem for p in (ROOT / "src/toolbreaker/integrations").glob("[!_]*.py"))
    found = []
    for module in modules:
        for line in extras[module.replace("_", "-")]:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                found.append(requirement)
    return found


def main(argv: list[str]) -> int:
    """Run one command (``check`` or ``lowest``); 2 on a bad command or a missing framework."""
    if argv == ["check"]:
        missing = []
        for requirement in adapter_requirements():
            try:
                version = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(requirement.name)
                continue
            print(f"{requirement.name}=={version}")
        if missing:
            print(f"error: the extras name {', '.join(missing)}, not installed", file=sys.stderr)
            return 2
        return 0
    if argv == ["lowest"]:
        for requirement in adapter_requirements():
            lower = [s.version for s in requirement.specifier if s.operator in (">=", "==")]
            if len(lower) != 1:
                print(f"error: {requirement} has no single lower bound", file=sys.stderr)
                return 2
            print(f"{requirement.name}=={lower[0]}")
        return 0
    print("usage: python .ci/extras.py check|lowest", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
