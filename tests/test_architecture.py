"""docs/architecture.md is true to the code: its paths exist, its tables are the rules the
layering tests enforce, and every test it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_quality import ALLOWED, WINGS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
SRC = ROOT / "src" / "toolbreaker"
LAYERS = tuple(ALLOWED)


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _table(heading: str) -> dict[str, set[str]]:
    """The two first columns of the markdown table whose header row starts with ``heading``."""
    rows: dict[str, set[str]] = {}
    lines = DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[0].strip("`").rstrip("/")
        rows[name] = {c.strip("`").rstrip("/") for c in re.findall(r"`[^`]+`", cells[1])}
    return rows


def test_every_path_the_page_names_exists():
    """A source path or package in backticks (``runtime/_run/_driver.py``, ``core/_run/``)
    names a file or folder of src/toolbreaker/; a ``tests/...`` path one of the tests."""
    missing = []
    for span in _code_spans(DOC):
        path = span.split("::")[0]
        if path.startswith("tests/"):
            found = (ROOT / path).exists()
        elif path.split("/")[0] in LAYERS and "/" in path and " " not in path:
            found = (SRC / path).exists()
        else:
            continue
        if not found:
            missing.append(span)
    assert missing == []


def test_every_test_the_page_names_exists():
    """``tests/x.py::test_name`` names a test function of that file."""
    missing = []
    for span in _code_spans(DOC):
        if not span.startswith("tests/") or "::" not in span:
            continue
        path, name = span.split("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if name not in names:
            missing.append(span)
    assert missing == []


def test_the_layer_table_is_the_layering_rule():
    """The page's table of layers says what the layering test enforces, row by row."""
    table = _table("layer")
    assert set(table) == set(ALLOWED)
    for layer, allowed in table.items():
        assert allowed | {layer} == ALLOWED[layer], layer


def test_the_wing_table_is_the_wing_rule():
    """The page's table of runtime wings says what the wing test enforces."""
    table = _table("wing")
    assert set(table) == set(WINGS)
    for wing, allowed in table.items():
        assert allowed | {wing} == WINGS[wing], wing


def test_every_shell_the_page_lists_exists():
    """Each row of "Around the call" names modules that exist."""
    table = _table("shell")
    assert table
    for shell in table:
        for path in re.findall(r"[a-z_/]+\.py", shell):
            assert (SRC / path).is_file(), path


def test_the_breaker_is_a_class_of_parts_not_layers():
    """``Breaker`` inherits nothing: what it does is done by the parts it holds."""
    from toolbreaker import Breaker

    assert Breaker.__mro__ == (Breaker, object)


def test_the_breaker_parts_stand_alone_and_the_breaker_holds_each():
    """Each row of the page's table of ``Breaker``'s parts names a class of its module
    that a breaker holds, and no part's module imports the breaker's, not even for
    annotations (a part that hands the breaker to users knows it as a type parameter)."""
    from toolbreaker import Breaker

    lines = DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| breaker part |"))
    breaker = Breaker("architecture", timeout=1.0, degrade=["omit"], scope="tenant")
    held = {type(value).__name__ for value in vars(breaker).values()}
    parts = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        module = re.findall(r"`runtime/_breaker/(_\w+)\.py`", line)[0]
        name = re.findall(r"\| `(\w+)`:", line)[0]
        parts.append(name)
        source = SRC / "runtime" / "_breaker" / f"{module}.py"
        tree = ast.parse(source.read_text())
        assert name in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}, name
        imported = {
            n.module.rsplit(".", 1)[-1]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module
        }
        assert "_breaker" not in imported, module
    assert set(parts) <= held
    breaker.close()


def test_the_tests_mirror_the_source_layout():
    """Each folder of tests/ is a package of src/toolbreaker/ at the same path, so a test
    is found where its module is (tests/runtime/breaker/ for runtime/_breaker/: a folder of
    tests drops the leading underscore of a private package)."""
    folders = [
        path.relative_to(ROOT / "tests")
        for path in (ROOT / "tests").rglob("*")
        if path.is_dir() and path.name != "__pycache__" and any(path.glob("test_*.py"))
    ]
    assert folders

    def mirrored(folder: Path) -> bool:
        here = SRC
        for part in folder.parts:
            # a package, not a folder a rename left behind with only its __pycache__
            candidates = (here / p for p in (part, f"_{part}"))
            here = next((c for c in candidates if (c / "__init__.py").is_file()), here / part)
        return (here / "__init__.py").is_file()

    strays = [str(folder) for folder in folders if not mirrored(folder)]
    assert strays == []


def test_every_module_of_the_tests_has_a_name_of_its_own():
    """tests/ has no packages: pytest puts each test file's folder first on ``sys.path``,
    so two modules of one name in two folders would shadow each other at collection."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        if path.name not in ("conftest.py", "__init__.py"):
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def _import_graph() -> dict[str, set[str]]:
    """Each module of src/toolbreaker/ and the modules of it that it imports: anywhere in
    its source, at the top, under ``if TYPE_CHECKING:`` (an annotation is an arrow too) or
    inside a function (a lazy import is one, later)."""
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolved(name: str) -> str:
        while name not in modules:  # a name imported from a module: the module
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] == "toolbreaker":
                    targets |= {resolved(f"{node.module}.{a.name}") for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {
                    resolved(a.name) for a in node.names if a.name.startswith("toolbreaker.")
                }
        graph[module] = targets - {module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_its_way_back_to_itself():
    """No circle of imports anywhere in src/: not between layers, not between a class and
    its parts (a part that hands its owner to users is not given the owner's type by an
    import under ``if TYPE_CHECKING:``), not through a lazy import inside a function."""
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    """The check sees a circle closed by an annotation-only import, and a clean chain."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
