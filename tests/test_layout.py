"""The package's shape (issue 42): no import cycles between its modules, no module
takes a private name out of another, and no module, function or class outgrows
what a reader takes in at once (``MODULE_LINES``, ``FUNCTION_LINES``,
``PUBLIC_METHODS``). Read from the source with ``ast``: only
imports at a module's top level count (those inside a function or under
``if TYPE_CHECKING:`` run late or never)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hybrid_memory"
MODULE_LINES = 600
FUNCTION_LINES = 60
PUBLIC_METHODS = 30


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _top_imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) of each top-level import."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[str, str | None]] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.append((whole, None) if whole in modules else (base, alias.name))
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return [(m, n) for m, n in found if m in modules and m != name]


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {m: {t for t, _ in _top_imports(m, p, modules)} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_module_takes_a_private_name_from_another() -> None:
    modules = _modules()
    taken = [(m, t, n) for m, p in modules.items() for t, n in _top_imports(m, p, modules)
             if n is not None and n.startswith("_") and not n.endswith("__")]
    assert not taken, taken


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in _modules().items()}


def test_no_module_function_or_class_is_too_big() -> None:
    too_long = {name: n for name, path in _modules().items()
                if (n := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    functions, classes = {}, {}
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    functions[f"{name}.{node.name}:{node.lineno}"] = length
            elif isinstance(node, ast.ClassDef):
                public = {m.name for m in node.body
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("_")}
                if len(public) > PUBLIC_METHODS:
                    classes[f"{name}.{node.name}"] = len(public)
    assert not too_long, f"modules over {MODULE_LINES} lines: {too_long}"
    assert not functions, f"functions over {FUNCTION_LINES} lines: {functions}"
    assert not classes, f"classes over {PUBLIC_METHODS} public methods: {classes}"


def test_the_checks_see_the_package() -> None:
    # (a wrong root would make both checks above pass on nothing)
    modules = _modules()
    assert {"hybrid_memory.tree", "hybrid_memory.embed.factory", "hybrid_memory.portability.rewind"} <= set(modules)
    imports = {t for t, _ in _top_imports("hybrid_memory.tree", modules["hybrid_memory.tree"], modules)}
    assert {"hybrid_memory.portability", "hybrid_memory.embed", "hybrid_memory.retrieval"} <= imports
    tree = _trees()["hybrid_memory.tree"]
    memory_tree = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MemoryTree")
    assert sum(isinstance(m, ast.FunctionDef) for m in memory_tree.body) > 20
