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
from frameworks import installed

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
    return set(json.loads(loaded_output(statement).splitlines()[-1]))


def loaded_output(statement: str) -> str:
    """What ``statement`` prints in a fresh interpreter, then (a last line) the modules it
    added to ``sys.modules``, as JSON."""
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
    return done.stdout


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


#: What a breaker and a registry load on first use, never at import: the standard library
#: of the rarer paths (JSON read or written, a file or a sheet read, a log record, a stale
#: answer's date, a shared slot's shuffle, a UUID met while masking, a name a sheet lacks)
#: and the parts of toolbreaker a plain breaker does not use (the fingerprint of the
#: model-as-retry ledger, a shared store's retry budget, the health checker, the
#: published-sheet follower, the stop packet). ``from toolbreaker import Registry``
#: loaded every one of them before.
ON_FIRST_USE = (
    "datetime",
    "decimal",
    "difflib",
    "ipaddress",
    "json",
    "logging",
    "pathlib",
    "platform",
    "random",
    "string",
    "textwrap",
    "traceback",
    "unicodedata",
    "urllib",
    "uuid",
    "toolbreaker.core._run.fingerprint",
    "toolbreaker.runtime._breaker._shared_budget",
    "toolbreaker.runtime._fleet._health",
    "toolbreaker.runtime._fleet._published",
    "toolbreaker.runtime._packet",
)


@pytest.mark.parametrize("name", ["Breaker", "Registry"])
def test_a_breaker_or_a_registry_leaves_the_rarer_modules_for_first_use(name):
    """None of :data:`ON_FIRST_USE` loads with the import: each loads where it is used."""
    modules = loaded(f"import toolbreaker; from toolbreaker import {name}")
    assert under(modules, ON_FIRST_USE) == []


def test_a_registrys_first_call_loads_none_of_them_either():
    """A registry, a breaker and a successful call: the path of the import's promise
    still loads none of :data:`ON_FIRST_USE` (they are not merely moved to the call)."""
    modules = loaded(
        "from toolbreaker import Registry\n"
        "assert Registry().get('x').call(lambda: 42, timeout=5) == 42"
    )
    assert under(modules, ON_FIRST_USE) == []


#: Each lazily loaded module, used in a fresh interpreter that has not loaded it: the
#: README's sheet and guard (pathlib, tomllib), a failure the classifier does not know
#: (logging, masked, naming the line that logged), masking a UUID and a date, JSON read
#: strictly and written canonically, HTTP statuses classified, the retry ledger's
#: fingerprint, a name a sheet with rows lacks (difflib), a hand-off's stop packet.
FIRST_USES = r"""
import sys
from toolbreaker import Registry

lazy = ("json", "logging", "pathlib", "uuid", "difflib", "datetime")
assert [m for m in lazy if m in sys.modules] == [], sys.modules.keys()

breakers = Registry.from_toml(EXAMPLES + "/breakers.toml")
assert breakers.sheet == "breakers.toml"
search = breakers.get("search", operation="read")

@search.guard(timeout=4.0)
def search_catalog(query: str) -> dict:
    return {"hits": [query]}

assert search_catalog("lamp") == {"hits": ["lamp"]}

breaker = Registry().get("x")
assert breaker.call(lambda: 42, timeout=5) == 42

def boom():
    raise KeyError("sk-" + "a" * 30)

try:
    breaker.call(boom, timeout=5)
except KeyError:
    pass
else:
    raise AssertionError("the call's own error must come back")

import io, logging
logger = logging.getLogger("toolbreaker")
assert [type(f).__name__ for f in logger.filters] == ["_Masked"], logger.filters
stream = io.StringIO()
handler = logging.StreamHandler(stream)
handler.setFormatter(logging.Formatter("%(funcName)s %(message)s"))
logger.addHandler(handler)
from toolbreaker.runtime._log import hook_failed, log

def reporter():
    log.warning("password=%s", "hunter2hunter2")

reporter()
hook_failed("a listener", ValueError("token=" + "b" * 30))
shown = stream.getvalue()
assert "hunter2" not in shown and "b" * 30 not in shown, shown
assert shown.startswith("reporter password=[REDACTED]"), shown

import datetime, uuid
from toolbreaker.core._run.redact import redact
kept = {"id": uuid.UUID(int=7), "at": datetime.date(2026, 1, 2)}
assert redact({**kept, "api_key": "x"}) == {**kept, "api_key": "[REDACTED]"}

from toolbreaker.core._canonical import canonical_json
from toolbreaker.core._files import loads_json
from toolbreaker.errors import PolicyError
assert canonical_json({"b": 1, "a": [2]}) == b'{"a":[2],"b":1}'
assert loads_json('{"a": 1}', PolicyError) == {"a": 1}
for bad in ('{"a": 1, "a": 2}', '{"a": [[[1]]]}', '{"a": "\\ud800"}', "{"):
    try:
        loads_json(bad, PolicyError, max_depth=2)
    except PolicyError:
        pass
    else:
        raise AssertionError(bad)

from toolbreaker.runtime import classify_status
assert classify_status(503).kind == "failure" and classify_status(503) is classify_status(503)
assert classify_status(404).kind == "success" or classify_status(404).kind == "ignored"
assert classify_status(200).kind == "success"
assert classify_status(429, {"x-ratelimit-reset-requests": "1m30s"}).retry_after_ms == 90_000

from toolbreaker.core._run.retrying import action_of
assert action_of("t", {"a": 1}) == action_of("t", {"a": 1.0}) is not None

from toolbreaker.errors import RowNotFound
try:
    breakers.get("serch", operation="read")
except RowNotFound as exc:
    assert "search" in str(exc), exc
else:
    strict = Registry.from_toml(EXAMPLES + "/breakers.toml", strict=True)
    try:
        strict.get("serch", operation="read")
    except RowNotFound as exc:
        assert "search" in str(exc), exc
    else:
        raise AssertionError("a slip of a row's name is named")
assert "difflib" in sys.modules
"""


def test_what_loads_on_first_use_works_in_a_fresh_interpreter():
    """Every module the import leaves for later loads where it is first used and does its
    work there, in an interpreter where nothing else loaded it first."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    path = os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", f"EXAMPLES = {str(examples)!r}\n{FIRST_USES}"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr


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


def test_an_adapter_loads_no_run_guard_until_one_is_used():
    """Importing an adapter loads what it uses at its top: ``integrations/_kit.py`` imports
    each name when first used, so a breaker-only program that imports an adapter never
    loads the run guard; the first use of one loads it.

    One interpreter imports every installed adapter in turn (each import of a framework
    costs seconds of CPU, and most share their dependencies), and says which modules each
    import added: an adapter that loaded a run guard module is named with it.
    """
    present = [a for a, framework in sorted(ADAPTERS.items()) if installed(framework)]
    assert "httpx" in present  # the test extra installs it: never an empty loop
    statement = "\n".join(
        [
            "added = {}",
            *(
                f"seen = set(sys.modules); import toolbreaker.integrations.{adapter}; "
                f"added[{adapter!r}] = sorted(set(sys.modules) - seen)"
                for adapter in present
            ),
            "import toolbreaker.integrations._kit as kit; kit.RunGuard",
            "print(json.dumps(added))",
        ]
    )
    lines = loaded_output(statement).splitlines()
    added = json.loads(lines[0])
    assert {a: run_guard_modules(set(m)) for a, m in added.items()} == {a: [] for a in present}
    assert "toolbreaker.runtime._run._guard" in json.loads(lines[1])


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
