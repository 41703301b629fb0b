"""``import toolbreaker`` loads the package alone; a name loads what it needs (PEP 562).

Each check runs in a fresh interpreter and reads ``sys.modules``: which modules an import
loaded, never how long it took (``benchmarks/bench_import.py`` measures the time).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolbreaker

SRC = Path(toolbreaker.__file__).resolve().parent

#: What ``import toolbreaker`` must not load: the heavy standard library the shells and
#: stores use, and every part of toolbreaker beyond its lazy top.
HEAVY = (
    "asyncio",
    "concurrent.futures",
    "decimal",
    "email",
    "hashlib",
    "inspect",
    "json",
    "logging",
    "socket",
    "sqlite3",
    "ssl",
    "threading",
    "tomllib",
)

#: What a breaker or a registry never needs: the run guard, the stores of other kinds, the
#: adapters, the observers, the command line, the helpers of other features.
NOT_FOR_A_BREAKER = (
    "sqlite3",
    "toolbreaker.cli",
    "toolbreaker.importing",
    "toolbreaker.instrumentation",
    "toolbreaker.integrations",
    "toolbreaker._replaying",
    "toolbreaker.runtime._run",
    "toolbreaker.stores._postgres",
    "toolbreaker.stores._redis",
    "toolbreaker.stores._sqlite",
    "toolbreaker.testing",
)


def loaded(statement: str) -> set[str]:
    """The modules ``statement`` adds to ``sys.modules`` in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{statement}\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    path = os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    return set(json.loads(done.stdout))


def under(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names))


def test_import_toolbreaker_loads_the_package_alone():
    """``import toolbreaker`` loads its top and the lazy loader, nothing else of the package
    and none of the heavy standard library (it loaded 89 modules of its own before)."""
    modules = loaded("import toolbreaker")
    assert sorted(m for m in modules if m.startswith("toolbreaker")) == [
        "toolbreaker",
        "toolbreaker._lazy",
    ]
    assert under(modules, HEAVY) == []


def test_a_policy_needs_the_core_alone():
    """``from toolbreaker import Policy`` loads the core and no shell, store or event loop."""
    modules = loaded("from toolbreaker import Policy")
    shells = ("toolbreaker.runtime", "toolbreaker.stores", "asyncio", "sqlite3", "logging")
    assert under(modules, shells) == []


@pytest.mark.parametrize("name", ["Breaker", "Registry"])
def test_a_breaker_or_a_registry_loads_no_run_guard_no_other_store_and_no_adapter(name):
    """A breaker and a registry load neither the run guard nor SQLite, Redis or PostgreSQL
    nor anything above the runtime; a breaker loads no fleet either."""
    modules = loaded(f"from toolbreaker import {name}")
    assert "toolbreaker.runtime._breaker._breaker" in modules
    unwanted = NOT_FOR_A_BREAKER + (("toolbreaker.runtime._fleet",) if name == "Breaker" else ())
    assert under(modules, unwanted) == []


@pytest.mark.parametrize("name", ["Breaker", "Registry"])
def test_a_breaker_or_a_registry_loads_no_event_loop(name):
    """A sync program's breaker and registry never load ``asyncio`` (about a third of
    their import time): the async paths import it when they first run."""
    modules = loaded(f"import toolbreaker; from toolbreaker import {name}")
    assert "asyncio" not in modules


#: What a breaker and a registry made in code never need at import: the sockets and mail
#: parsing of rare paths (a Retry-After date, a health checker's or a publisher's host
#: name), the futures of worker pools and the TOML parser of a sheet read.
NOT_AT_IMPORT = ("concurrent.futures", "email", "socket", "tomli", "tomllib")


@pytest.mark.parametrize("name", ["Breaker", "Registry"])
def test_a_breaker_or_a_registry_loads_no_socket_mail_futures_or_toml(name):
    """These load where they are used: ``import toolbreaker; from toolbreaker import
    Registry`` loaded 172 modules with them, 142 without."""
    modules = loaded(f"import toolbreaker; from toolbreaker import {name}")
    assert under(modules, NOT_AT_IMPORT) == []


def test_a_run_guard_loads_no_fleet_no_other_store_and_no_adapter():
    """``from toolbreaker import RunGuard`` loads the run shell, not the fleet, SQLite or an
    adapter."""
    modules = loaded("from toolbreaker import RunGuard")
    assert "toolbreaker.runtime._run._guard" in modules
    unwanted = tuple(n for n in NOT_FOR_A_BREAKER if n != "toolbreaker.runtime._run")
    assert under(modules, (*unwanted, "toolbreaker.runtime._fleet")) == []


#: Each adapter and the framework it needs (skipped where the framework is not installed).
#: The MCP gateway is not one of them: it runs a guard per host session, by design.
ADAPTERS = {
    "crewai": "crewai",
    "google_adk": "google.adk",
    "httpx": "httpx",
    "langchain": "langchain",
    "litellm": "litellm",
    "llama_index": "llama_index.core",
    "mcp": "mcp",
    "openai_agents": "agents",
    "pydantic_ai": "pydantic_ai",
}


def run_guard_modules(modules: set[str]) -> list[str]:
    """The run guard's modules among ``modules``: the run shell, less the tool spec a
    guarded tool's options are checked against (``runtime/_run/_tools.py``, which loads
    the core and the breaker alone)."""
    light = {"toolbreaker.runtime._run", "toolbreaker.runtime._run._tools"}
    return [m for m in under(modules, ("toolbreaker.runtime._run",)) if m not in light]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_an_adapter_loads_no_run_guard_until_one_is_used(adapter):
    """Importing an adapter loads what it uses at its top: ``integrations/_kit.py`` imports
    each name when first used, so a breaker-only program that imports an adapter never
    loads the run guard; the first use of one loads it."""
    pytest.importorskip(ADAPTERS[adapter])
    module = f"toolbreaker.integrations.{adapter}"
    assert run_guard_modules(loaded(f"import {module}")) == []
    used = loaded(f"import {module}, toolbreaker.integrations._kit as kit; kit.RunGuard")
    assert "toolbreaker.runtime._run._guard" in used


def test_every_public_name_and_every_star_import_resolves():
    """Each name of ``__all__`` resolves in a fresh interpreter, and ``import *`` binds them."""
    code = (
        "import toolbreaker\n"
        "names = {}\n"
        "exec('from toolbreaker import *', names)\n"
        "assert set(toolbreaker.__all__) <= set(names), set(toolbreaker.__all__) - set(names)\n"
        "assert set(toolbreaker.__all__) <= set(dir(toolbreaker))"
    )
    loaded(code)


LAZY_PACKAGES = (
    "toolbreaker",
    "toolbreaker.core",
    "toolbreaker.runtime",
    "toolbreaker.stores",
    "toolbreaker.integrations._kit",
)


def _type_checking_imports(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """What the ``if TYPE_CHECKING:`` block imports, by module."""
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                assert statement.module is not None
                found[statement.module] = tuple(alias.name for alias in statement.names)
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_what_type_checkers_see_is_what_the_package_loads(package):
    """The ``TYPE_CHECKING`` imports (what mypy and editors see) are the homes the lazy
    ``__getattr__`` imports from, name by name and module by module, and ``__all__``
    lists exactly those names (``__version__`` aside): one list, held to the other."""
    module = __import__(package, fromlist=["_HOMES"])
    path = Path(module.__file__)
    seen = _type_checking_imports(ast.parse(path.read_text(encoding="utf-8")))
    assert seen == dict(module._HOMES)
    names = [name for names in seen.values() for name in names]
    assert sorted(names) == sorted(n for n in module.__all__ if n != "__version__")
    for home, homed in seen.items():
        for name in homed:
            assert getattr(module, name) is getattr(__import__(home, fromlist=[name]), name)


def test_an_unknown_name_is_an_attribute_error():
    """A misspelt name is an ``AttributeError`` naming it (``from ... import`` turns it
    into the usual ``ImportError``), not a failed import of a module of that name."""
    with pytest.raises(AttributeError, match="'Regsitry'"):
        _ = toolbreaker.Regsitry  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="Regsitry"):
        exec("from toolbreaker import Regsitry", {})
