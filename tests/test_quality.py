"""The house rules hold: ruff and mypy --strict are clean, the public surface is complete."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import toolbreaker
from once import once

ROOT = Path(__file__).resolve().parents[1]
CODE = [d for d in ("src", "tests", "benchmarks", "examples") if (ROOT / d).is_dir()]
CODE += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.py"))  # the site's hooks


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_is_clean():
    """ruff check and ruff format --check report nothing.

    ruff is run by the interpreter running the tests (it is in the ``test`` extra), so the
    check never depends on a ``PATH`` that happens to hold it.
    """
    check = run(sys.executable, "-m", "ruff", "check", *CODE)
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = run(sys.executable, "-m", "ruff", "format", "--check", *CODE)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


#: Code that misspells one option of each typed option list (breaker and tool options).
MISSPELT = """
from toolbreaker import Breaker, Registry, RunGuard

registry = Registry()
registry.get("search", timout=3.0)
Breaker("search", fallbak="snapshot")
guard = RunGuard("typo")
guard.ensure_tool("pay", rsk="irreversible")
guard.tool("look", requried=True)
registry.get("search", timeout="3")
"""


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """One mypy --strict run over src/ and the misspelt sample together.

    A cold mypy spends half a minute reading the frameworks' types; one run serves both
    tests below, whichever worker asks first (``once``).
    """

    def check(into: Path) -> None:
        sample = into / "misspelt.py"
        sample.write_text(MISSPELT, encoding="utf-8")
        mypy = (sys.executable, "-m", "mypy", "--strict", "--no-error-summary")
        done = run(*mypy, "src", str(sample))
        (into / "status").write_text(str(done.returncode), encoding="utf-8")
        (into / "report").write_text(done.stdout + done.stderr, encoding="utf-8")

    report = once(tmp_path_factory, "mypy", check)
    status = int((report / "status").read_text(encoding="utf-8"))
    return status, (report / "report").read_text(encoding="utf-8")


def test_mypy_strict_is_clean(mypy_report):
    """mypy --strict on src/ reports nothing."""
    _, report = mypy_report
    mine = [line for line in report.splitlines() if line and "misspelt.py:" not in line]
    assert mine == [], report


def test_mypy_rejects_a_misspelt_option(mypy_report):
    """The option lists are typed where they are taken (``Registry.get``, ``Breaker``,
    ``RunGuard.ensure_tool`` and ``RunGuard.tool``): mypy names each misspelt option and
    an option of the wrong type, so a typo fails before the code runs."""
    status, report = mypy_report
    assert status == 1, report
    errors = [line for line in report.splitlines() if "misspelt.py:" in line]
    lines = {int(line.split("misspelt.py:")[1].split(":")[0]) for line in errors}
    assert lines == {5, 6, 8, 9, 10}, report
    for name in ("timout", "fallbak", "rsk", "requried"):
        assert any(f'"{name}"' in line for line in errors), (name, report)


def test_public_names_are_exported_and_sorted():
    """__all__ is sorted, every name in it exists, and every public name is in it."""
    names = [n for n in toolbreaker.__all__ if n != "__version__"]
    assert names == sorted(names)
    for name in toolbreaker.__all__:
        assert hasattr(toolbreaker, name), name
    public = {
        name
        for name in dir(toolbreaker)
        if not name.startswith("_") and not isinstance(getattr(toolbreaker, name), ModuleType)
    }
    assert public == set(names)


# -- the public surface: what a newcomer holds ----------------------------------------------

#: Every public module (no part of its dotted name after ``toolbreaker`` starts with an
#: underscore) and its ``__all__``: the whole public surface. A new public module or name
#: is a decision: it is added here, with its docstring and its place in the API reference.
PUBLIC: dict[str, tuple[str, ...]] = {
    "toolbreaker": (
        "Boundary",
        "Breaker",
        "Budget",
        "ClassLimits",
        "GuardedTool",
        "ModelPrice",
        "Policy",
        "Registry",
        "RetryPolicy",
        "RunGuard",
        "SiblingOutcome",
        "Siblings",
        "TraceRecorder",
        "Transition",
        "Verdict",
        "__version__",
        "classify_exception",
        "drain",
        "idempotency_key",
        "prune_done",
        "publish_policy",
        "scope",
        "shell_risk",
        "shell_risk_of",
        "system_prompt_line",
        "token_cost",
    ),
    "toolbreaker.cli": ("main",),
    "toolbreaker.core": (
        "BreakerState",
        "Event",
        "Replay",
        "apply",
        "changed_phase",
        "diff",
        "opened",
        "read_trace",
        "rejects_callers",
        "replay",
    ),
    "toolbreaker.errors": (
        "AsyncCallError",
        "BusinessKeyError",
        "CircuitOpen",
        "DeploymentsUnavailable",
        "FingerprintError",
        "JournalNotDurable",
        "MissingExtra",
        "NotSent",
        "PermitError",
        "PolicyError",
        "ReceiptError",
        "RecordCorrupt",
        "RegistryFull",
        "RowNotFound",
        "RunStateError",
        "RunStopped",
        "StoreUnavailable",
        "StoreWriteUnknown",
        "ToolReportedError",
        "ToolbreakerDeprecationWarning",
        "ToolbreakerError",
        "TraceError",
        "UnsupportedTypeError",
        "WriteTransitionError",
    ),
    "toolbreaker.importing": ("import_runs",),
    "toolbreaker.instrumentation": (),
    "toolbreaker.instrumentation.opentelemetry": ("instrument",),
    "toolbreaker.instrumentation.prometheus": ("register", "register_guards"),
    "toolbreaker.instrumentation.stream": ("StreamPublisher", "iter_entries", "open_stream"),
    "toolbreaker.integrations": (),
    "toolbreaker.integrations.crewai": ("arun_stop", "protect", "run_stop"),
    "toolbreaker.integrations.google_adk": ("ToolbreakerPlugin", "stop_of", "tool_metadata"),
    "toolbreaker.integrations.httpx": ("AsyncBreakerTransport", "BreakerTransport"),
    "toolbreaker.integrations.langchain": ("STOP_KEY", "ToolbreakerMiddleware"),
    "toolbreaker.integrations.litellm": ("GuardedRouter",),
    "toolbreaker.integrations.llama_index": ("arun_stop", "protect", "run_stop"),
    "toolbreaker.integrations.mcp": (
        "IDEMPOTENCY_META_KEY",
        "GuardedClient",
        "MalformedResult",
        "RoundsAbandoned",
        "TaskFailedError",
        "TaskOutcomeUnknown",
        "ToolResultError",
    ),
    "toolbreaker.integrations.mcp_gateway": ("Gateway", "UpstreamSpec"),
    "toolbreaker.integrations.openai_agents": ("protect", "run_config"),
    "toolbreaker.integrations.pydantic_ai": (
        "ToolbreakerCapability",
        "arun_stop",
        "run_stop",
        "tool_metadata",
    ),
    "toolbreaker.runtime": (
        "Attachment",
        "Permit",
        "Rejection",
        "Step",
        "StopPacket",
        "ToolType",
        "classify_status",
        "hidden_tools_line",
        "unavailable_result",
    ),
    "toolbreaker.stores": (
        "AsyncStore",
        "LocalFallback",
        "MemoryStore",
        "PostgresStore",
        "RedisStore",
        "SQLiteStore",
        "Store",
    ),
    "toolbreaker.testing": (
        "CHAT_ROUTE",
        "ExerciseContext",
        "ExerciseReport",
        "FakeClock",
        "Fault",
        "ToolService",
        "capture_transitions",
        "exercise",
        "force_state",
        "model_plan",
        "next_call",
        "request_json",
        "scripted_agent",
        "service_tools",
        "shipped_scenarios",
        "unprotected_agent",
    ),
    "toolbreaker.testing.pytest_plugin": ("toolbreaker_exercise",),
}

#: The most public names, counted per module (a name re-exported by ``toolbreaker`` and
#: kept in its home module counts twice), and the most distinct objects they name.
MOST_NAMES = 130
MOST_OBJECTS = 129


def _module_file(module: str) -> Path:
    path = ROOT / "src" / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _public_modules() -> set[str]:
    """The modules of src/toolbreaker/ with no part of their name starting with ``_``."""
    found = set()
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts[1:]):
            found.add(".".join(parts))
    return found


def _static_all(module: str) -> list[str]:
    import ast

    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = ast.literal_eval(node.value)  # type: ignore[union-attr]
            assert isinstance(value, list), module
            return value
    raise AssertionError(f"{module} has no __all__")


def private_imports(code: str) -> list[str]:
    """What ``code`` imports of toolbreaker that is not public: a module outside the list,
    or a name outside its module's ``__all__`` (the examples and the docs' blocks use
    public names only)."""
    import ast

    wrong = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("toolbreaker"):
            module = node.module or ""
            if module not in PUBLIC:
                wrong.append(f"from {module} import ...")
                continue
            for alias in node.names:
                if alias.name not in PUBLIC[module] and f"{module}.{alias.name}" not in PUBLIC:
                    wrong.append(f"from {module} import {alias.name}")
        elif isinstance(node, ast.Import):
            wrong += [
                f"import {a.name}"
                for a in node.names
                if a.name.startswith("toolbreaker.") and a.name not in PUBLIC
            ]
    return wrong


def test_the_public_modules_are_the_list():
    """A module is public when no part of its name after ``toolbreaker`` starts with an
    underscore; the public ones are exactly the list, so a new one is a decision."""
    assert _public_modules() == set(PUBLIC)


def _docstring_of(module: str, name: str) -> str | None:
    """The docstring of ``name`` as ``module`` defines it, read from the source (no
    framework imported): a class's or function's own, the string after a constant's or
    type alias's assignment, or, for an imported name, its home module's; ``None`` when
    ``module`` neither defines nor imports ``name``."""
    import ast

    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == name:
                return ast.get_docstring(node) or ""
            continue
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            after = tree.body[i + 1] if i + 1 < len(tree.body) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return after.value.value.strip()
            return ""
    for node in ast.walk(tree):  # imported, at the top or under ``if TYPE_CHECKING:``
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and any(a.name == name and a.asname in (None, name) for a in node.names)
        ):
            return _docstring_of(node.module, name)
    return None


def test_each_public_module_exports_its_list():
    """Every public module's ``__all__`` is its row of the list, and names what the module
    defines or imports."""
    for module, names in PUBLIC.items():
        assert sorted(_static_all(module)) == sorted(names), module
        missing = [name for name in names if _docstring_of(module, name) is None]
        assert missing == [], module


def test_every_public_name_has_a_docstring():
    """Every public module and name has a docstring of its own (a class or function its
    ``__doc__``, a constant or type alias the string after its assignment): the API
    reference shows what has one and leaves the rest out."""
    import ast

    undocumented = []
    for module, names in PUBLIC.items():
        tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
        if not ast.get_docstring(tree):
            undocumented.append(module)
        undocumented += [f"{module}.{name}" for name in names if not _docstring_of(module, name)]
    assert undocumented == []


def test_the_api_reference_is_the_public_modules():
    """docs/reference/ renders every public module (``::: module``) and no private one,
    and shows a module's ``__all__`` alone (``filters: public``); the site's build test
    checks each public name's entry on the built pages."""
    import re

    shown = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        shown |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(encoding="utf-8"), re.M))
    assert shown == set(PUBLIC)
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^ +filters: public$", config, re.M)


def _home_of(module: str, name: str) -> str:
    """The module that defines ``name``, following ``module``'s imports of it."""
    import ast

    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and any(a.name == name and a.asname in (None, name) for a in node.names)
        ):
            return _home_of(node.module, name)
    return module


@pytest.mark.parametrize("package", ["integrations", "instrumentation"])
def test_adapters_use_public_names_or_the_documented_internal_interface(package):
    """An adapter (or an exporter) imports of toolbreaker only public modules, the exception
    tree, the extras helper, its own package, and what the rest of toolbreaker it needs
    through its package's ``_kit.py`` (``integrations/_kit.py``,
    ``instrumentation/_kit.py``), the internal interfaces docs/guide/development.md
    describes."""
    wrong = []
    for path in sorted((SRC / package).rglob("*.py")):
        if path.name == "_kit.py":
            continue
        for module, _names in _imports(path):
            if not module.startswith("toolbreaker"):
                continue
            if module.startswith(f"toolbreaker.{package}"):
                continue
            if module in PUBLIC or module in ("toolbreaker.errors", "toolbreaker._extras"):
                continue
            wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []


def test_the_public_surface_stays_small():
    """About 130 names a newcomer can hold: counted per module, and as distinct objects
    (``tool_metadata`` of two adapters is one function); a name has one public home."""
    assert sum(len(names) for names in PUBLIC.values()) <= MOST_NAMES
    homes = {(_home_of(module, name), name) for module, names in PUBLIC.items() for name in names}
    assert len(homes) <= MOST_OBJECTS


def test_import_pulls_in_no_optional_dependency():
    """import toolbreaker imports no framework, redis or web library."""
    code = (
        "import sys, toolbreaker; bad = [m for m in ('redis', 'httpx', 'langchain', 'agents', "
        "'pydantic_ai', 'mcp', 'prometheus_client', 'opentelemetry', 'starlette', 'uvicorn') "
        "if m in sys.modules]; "
        "print(bad)"
    )
    done = run(sys.executable, "-c", code)
    assert done.stdout.strip() == "[]", done.stderr


# -- layering: arrows point down ------------------------------------------------------------

SRC = ROOT / "src" / "toolbreaker"

#: What each layer may import from toolbreaker (besides itself and the modules at the
#: package's top that every layer may use: errors, _extras, _lazy).
ALLOWED = {
    # The one exception tree, which every module imports: it imports nothing of toolbreaker.
    "errors.py": {"errors.py"},
    # Import an optional extra, or say which one to install.
    "_extras.py": {"_extras.py"},
    # Names a package re-exports, imported when first used (PEP 562).
    "_lazy.py": {"_lazy.py"},
    "core": {"core"},
    "stores": {"core", "stores"},
    # The tuners' profiles of recorded runs are measured through the one run driver.
    "runtime": {"core", "stores", "runtime", "_tuning"},
    "instrumentation": {"core", "stores", "runtime", "instrumentation"},
    "integrations": {"core", "stores", "runtime", "integrations"},
    "testing": {"core", "stores", "runtime", "testing"},
    # The replay engine: the core's trace driver carried out in bounded memory.
    "_replaying": {"core", "_replaying"},
    # The tuners: pure, on the core alone.
    "_tuning": {"core", "_tuning"},
    # Recorded runs from other formats: the recorded-run format and the classifier.
    "importing": {"core", "runtime", "importing"},
    "cli": {
        "core",
        "stores",
        "runtime",
        "cli",
        "testing",
        "instrumentation",
        "_replaying",
        "importing",
        "integrations",
        "_tuning",
    },
}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "toolbreaker" or len(parts) < 2:
        return None
    return parts[1]


#: The modules at the package's top that every layer may import; errors.py imports none.
BASE = ("errors", "_extras", "_lazy")


def test_imports_point_down_only():
    """core imports only core and errors; stores never runtime; runtime never adapters or cli;
    the replay engine only the core; errors.py nothing at all (not even for annotations);
    every package and module of src/toolbreaker/ has its row (the package's
    ``__init__.py``, which re-exports the public names, and ``__main__.py`` excepted)."""
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.name for p in SRC.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert (packages | modules) - set(ALLOWED) == set(), "a package the layering rules do not know"
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        own = path.relative_to(SRC).parts[0]
        if own not in ALLOWED:
            continue
        for module, _names in _imports(path):
            layer = _layer(module)
            if layer is None or layer == own.removesuffix(".py"):
                continue
            if own != "errors.py" and layer in BASE:
                continue
            if layer not in ALLOWED[own]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []


#: The pure modules: they decide from what they are given. The core, the tuners and the
#: exercise judge (which lives with the exercise helpers it serves).
PURE = ("core", "_tuning", "testing/_scenario.py")

#: The standard library's clocks, I/O, processes, threads and locks: what a pure module
#: never imports (reading a file it is asked to read is allowed, as ``pathlib``).
IMPURE = frozenset(
    {
        "asyncio",
        "concurrent",
        "http",
        "multiprocessing",
        "os",
        "random",
        "select",
        "selectors",
        "signal",
        "socket",
        "sqlite3",
        "subprocess",
        "threading",
        "time",
        "urllib",
    }
)


def test_pure_modules_read_no_clock_and_do_no_io():
    """The core, the tuners and the exercise judge import no clock, socket, thread or
    process module, and of toolbreaker only the core, errors and their own package: the
    judge and the tuners moved out of ``core/`` stay as pure as they were in it."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if not any(relative == pure or relative.startswith(f"{pure}/") for pure in PURE):
            continue
        allowed = {"core", "errors", "_lazy", relative.split("/")[0]} - {"testing"}
        for module, _names in _imports(path):
            layer = _layer(module)
            if module.split(".")[0] in IMPURE or (layer is not None and layer not in allowed):
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []


#: Inside runtime/, what each wing may import (besides itself and the shared modules at
#: the top of runtime/: the step, the model-facing results, the clock, the log, packets).
WINGS = {
    "_breaker": {"_breaker"},
    "_run": {"_breaker", "_run"},
    "_fleet": {"_breaker", "_run", "_fleet"},
}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["toolbreaker", "runtime"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in WINGS else None


def test_runtime_wings_point_one_way():
    """The breaker shell never imports the run shell or the fleet; the run shell never the fleet.

    The shared modules at runtime/'s top import no wing at all (``runtime/__init__.py``
    is the public surface and re-exports them all).
    """
    wrong = []
    runtime = SRC / "runtime"
    for path in sorted(runtime.rglob("*.py")):
        parts = path.relative_to(runtime).parts
        if parts == ("__init__.py",):
            continue
        own = parts[0] if len(parts) > 1 else None
        allowed = WINGS[own] if own is not None else set()
        for module, _names in _imports(path):
            wing = _wing(module)
            if wing is not None and wing not in allowed:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []


def test_no_module_imports_another_modules_private_name():
    """``from toolbreaker.x import _name`` reaches into another module's internals."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        for module, names in _imports(path):
            if not module.startswith("toolbreaker"):
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    wrong.append(f"{path.relative_to(ROOT)}: from {module} import {name}")
    assert wrong == []


# -- one home per rule: phases are compared in the core only ------------------------------

#: Attributes that hold a breaker phase: a state's, and a transition record's two.
PHASE_ATTRIBUTES = frozenset({"phase", "to_phase", "from_phase"})


def _phase_comparisons(path: Path, label: str) -> list[str]:
    """Comparisons in ``path`` that involve a phase attribute (``x.phase == OPEN``,
    ``record.to_phase != "open"``, ``r.from_phase != r.to_phase``, ``s.phase in (...)``)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Attribute) and o.attr in PHASE_ATTRIBUTES for o in operands):
            found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_shell_compares_a_phase_itself():
    """Outside ``core/`` nothing compares a phase: shells ask the core's predicates
    (``rejects_callers``, ``opened``, ``changed_phase``, ``may_probe`` ...), so a rule such as
    "a forced close admits an open breaker's callers" has one home. The examples and the
    benchmarks are shells too: they ask the same predicates (the examples by their public
    names, from ``toolbreaker.core``)."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "core":
            continue
        wrong.extend(_phase_comparisons(path, str(path.relative_to(ROOT))))
    for folder in ("examples", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            wrong.extend(_phase_comparisons(path, str(path.relative_to(ROOT))))
    assert wrong == []


def test_the_phase_comparison_finder_finds_them(tmp_path):
    """The finder above sees each shape of phase comparison (a finder that finds nothing
    would pass the test above vacuously)."""
    sample = tmp_path / "sample.py"
    code = (
        "a = state.phase == OPEN\n"
        "b = record.to_phase != 'open'\n"
        "c = record.from_phase != record.to_phase\n"
        "d = s.phase in (OPEN, HALF_OPEN)\n"
        "e = phase == OPEN  # a plain name: an argument, not a state's phase\n"
    )
    sample.write_text(code, encoding="utf-8")
    found = _phase_comparisons(sample, "sample.py")
    assert [line.split(": ", 1)[0] for line in found] == [f"sample.py:{n}" for n in (1, 2, 3, 4)]


def _own_names(tree: Any) -> set[str]:
    """Every name a module defines for itself: functions, classes, methods, the names it
    assigns, the attributes it gives ``self`` or ``cls``, class fields, slots.

    Setting another object's attribute (``step._settled = True``) defines nothing: that
    is reaching into it too.
    """
    import ast

    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Tuple | ast.List)
            and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)
        ):
            names.update(
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    # Class fields (``_x: int``) are ast.Name stores inside AnnAssign: counted above.
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_attribute_uses() -> list[str]:
    """``x._name`` in a module of the package, where ``_name`` is another module's.

    Precise rather than noisy: ``self._x`` and ``cls._x`` are a class's own business, and
    a module's own private names (a class's slots used by a helper beside it) are its
    own; an attribute counts as another module's private name only when some other
    module of the package defines it and this one does not. A third party's private
    attributes (``asyncio``'s, a framework's) are out of this test's scope.
    """
    import ast

    paths = sorted(SRC.rglob("*.py"))
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    own = {path: _own_names(tree) for path, tree in trees.items()}
    defined_somewhere = {name for names in own.values() for name in names if _private(name)}
    wrong = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own[path] or node.attr not in defined_somewhere:
                continue
            wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return wrong


def test_no_module_reaches_into_another_modules_private_attributes():
    """No ``x._name`` on another module's private name: a shell drives another through its
    public (or documented internal) interface, as the run guard drives ``Breaker`` through
    ``admit``/``aadmit`` and settles a ``Step`` through ``give``/``claim``."""
    assert private_attribute_uses() == []


def test_the_private_attribute_check_finds_what_it_looks_for(tmp_path, monkeypatch):
    """The check is not blind: a module calling another's private method, or setting its
    private attribute, is found; one using its own private names, or ``self``'s, is not."""
    package = tmp_path / "toolbreaker"
    package.mkdir()
    (package / "a.py").write_text(
        "class A:\n    def _hidden(self):\n        return self._hidden2()\n"
        "    def _hidden2(self):\n        return 1\n"
    )
    (package / "b.py").write_text(
        "class B:\n    def __init__(self):\n        self._mine = 1\n\n\n"
        "def use(a, b):\n    a._hidden2 = 2\n    return a._hidden(), b._mine\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", package)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert sorted(private_attribute_uses()) == [
        "toolbreaker/b.py:7: a._hidden2",
        "toolbreaker/b.py:8: a._hidden",
    ]
