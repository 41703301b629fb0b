"""The suite stays cheap to collect: no test module imports an agent framework at its top.

Every worker of the suite collects every test module, so a framework imported at a module's
top is imported by every worker, though only the worker that runs its tests needs it
(LiteLLM alone costs seconds of CPU). Read from the source (``ast``), not by collecting
the suite in a fresh interpreter, which would cost more than it saves.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from frameworks import HEAVY

TESTS = Path(__file__).resolve().parent

#: The adapter of each framework: importing it imports the framework.
ADAPTERS = {
    "agents": "openai_agents",
    "crewai": "crewai",
    "google.adk": "google_adk",
    "langchain": "langchain",
    "litellm": "litellm",
    "llama_index": "llama_index",
    "pydantic_ai": "pydantic_ai",
}


def heavy(module: str) -> bool:
    """Whether importing ``module`` imports one of the frameworks (or a parts module)."""
    adapters = {f"toolbreaker.integrations.{name}" for name in ADAPTERS.values()}
    return (
        module.rsplit(".", 1)[-1].endswith("_parts")
        or any(module == name or module.startswith(name + ".") for name in HEAVY)
        or any(module == name or module.startswith(name + ".") for name in adapters)
    )


def run_at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes a module runs when it is imported: its statements, the blocks of its ``if``,
    ``try`` and ``with`` and the bodies of its classes; never a function's body, nor what
    only a type checker reads (``if TYPE_CHECKING:``)."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from statement.decorator_list
            yield from statement.args.defaults
            continue
        yield statement
        typing_only = isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(
            statement.test
        )
        for name in ("orelse",) if typing_only else ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(statement, name, None)
            if isinstance(inner, list):
                blocks = [h.body for h in inner] if name == "handlers" else [inner]
                for block in blocks:
                    yield from run_at_import(block)


def imported_at_top(path: Path, root: Path = TESTS) -> list[str]:
    """What ``path`` imports when it is imported, of the frameworks (and their adapters):
    ``FILE:LINE MODULE``, the file relative to ``root``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in run_at_import(tree.body):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named = [f"{node.module}.{alias.name}" for alias in node.names]
            modules = [node.module] if heavy(node.module) else named
        else:
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in ("importorskip", "import_module")
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                ):
                    modules.append(call.args[0].value)
        line = getattr(node, "lineno", 0)
        found += [f"{path.relative_to(root)}:{line} {m}" for m in modules if heavy(m)]
    return found


def test_no_test_module_imports_a_framework_at_its_top():
    """Only the parts modules (imported by the tests that use them) import a framework at
    their top; every other module of the suite imports it in its fixtures and tests."""
    modules = [p for p in sorted(TESTS.rglob("*.py")) if not p.stem.endswith("_parts")]
    assert len(modules) > 100
    found = [hit for path in modules for hit in imported_at_top(path)]
    assert found == []


def test_the_check_finds_an_import_at_the_top(tmp_path):
    """The check sees a framework imported at the top, in a guarded block, through its
    adapter, by ``importorskip`` and through a parts module; not inside a function."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import sys\n"
        "import pytest\n"
        "litellm = pytest.importorskip('litellm')\n"
        "if sys.version_info >= (3, 10):\n"
        "    from crewai import Agent\n"
        "from toolbreaker.integrations import llama_index\n"
        "from toolbreaker.integrations.google_adk import ToolbreakerPlugin\n"
        "from crewai_parts import ScriptedLLM\n"
        "import agents.testing\n"
        "if TYPE_CHECKING:\n"
        "    from pydantic_ai import Agent\n"
        "def test_inside():\n"
        "    import langchain\n",
        encoding="utf-8",
    )
    lines = [hit.split(" ", 1)[1] for hit in imported_at_top(sample, tmp_path)]
    assert lines == [
        "litellm",
        "crewai",
        "toolbreaker.integrations.llama_index",
        "toolbreaker.integrations.google_adk",
        "crewai_parts",
        "agents.testing",
    ]
