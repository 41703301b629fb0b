"""What the adapter extras in pyproject.toml ask for, for CI's scripts (no other list exists).

``python .ci/extras.py check``: every framework an adapter extra names for this Python is
installed (so an adapter test that skips for a missing framework is a real absence, not a
broken install). ``python .ci/extras.py lowest [MODULE]``: a constraints file pinning each
of those frameworks (or only the frameworks of the adapter ``MODULE``) at its lower bound
(nothing when ``MODULE``'s extra installs nothing on this Python).
``python .ci/extras.py modules``: the adapters whose extra installs something on this
Python, a line each: the module and its extra. The adapters are the modules of
src/toolbreaker/integrations; each has the extra of its name (``openai_agents`` ->
``openai-agents``).
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


def adapter_requirements(only: str | None = None) -> dict[str, list[Requirement]]:
    """Each adapter module's extra requirements whose marker holds on this Python."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    modules = sorted(p.stem for p in (ROOT / "src/toolbreaker/integrations").glob("[!_]*.py"))
    found: dict[str, list[Requirement]] = {}
    for module in modules:
        if only is not None and module != only:
            continue
        for line in extras[module.replace("_", "-")]:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                found.setdefault(module, []).append(requirement)
    return found


def main(argv: list[str]) -> int:
    """Run one command (see the module); 2 on a bad command or a missing framework."""
    if argv == ["modules"]:
        for module in adapter_requirements():
            print(module, module.replace("_", "-"))
        return 0
    if argv == ["check"]:
        missing = []
        for requirement in (r for rs in adapter_requirements().values() for r in rs):
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
    if argv[:1] == ["lowest"] and len(argv) <= 2:
        chosen = adapter_requirements(argv[1] if len(argv) == 2 else None)
        known = (ROOT / "src/toolbreaker/integrations" / f"{argv[-1]}.py").is_file()
        if len(argv) == 2 and not known:
            print(f"error: no adapter {argv[1]!r}", file=sys.stderr)
            return 2
        for requirement in (r for rs in chosen.values() for r in rs):
            lower = [s.version for s in requirement.specifier if s.operator in (">=", "==")]
            if len(lower) != 1:
                print(f"error: {requirement} has no single lower bound", file=sys.stderr)
                return 2
            print(f"{requirement.name}=={lower[0]}")
        return 0
    print("usage: python .ci/extras.py check|modules|lowest [MODULE]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
