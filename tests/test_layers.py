"""The package's import graph: no import circle, and no module imports the package face
(`vocabsurgeon/__init__.py`, which imports nearly everything): each module sits on a floor above
all that it imports, so it can be read without the ones above it."""

import ast
from pathlib import Path

import vocabsurgeon

PACKAGE = Path(vocabsurgeon.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports (lazy imports in functions included)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    out.add(full if full in paths else base)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        graph[name] = {m for m in out if m in paths and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_import_graph_has_no_circle():
    cycle = _cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_module_imports_the_package_face():
    graph = import_graph()
    upward = sorted(m for m, deps in graph.items() if "vocabsurgeon" in deps and m != "vocabsurgeon.__main__")
    assert upward == [], f"these modules import vocabsurgeon/__init__.py: {upward}"


def test_the_graph_reader_sees_a_circle_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _room(module: str) -> str:
    """The room of a module: its folder under the package (`fitted`, `validation`, ...) or, for a top-level
    module, its own name (`kl`, `runtime`, ...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "vocabsurgeon"


def test_the_rooms_import_each_other_without_a_circle():
    # Folders are concepts: fitting and validation both sit above kl and runtime, add above both, the CLI on
    # top. A folder that reached back into one above it would make the layout lie about the architecture.
    rooms: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        rooms.setdefault(_room(module), set()).update(_room(d) for d in deps if _room(d) != _room(module))
    cycle = _cycle(rooms)
    assert cycle is None, "rooms import in a circle: " + " -> ".join(cycle)
    assert "init" not in rooms["validation"] and "validation" not in rooms["init"]
    assert rooms["kl"] == set()


FRONT_ENDS = ("add", "extend", "trim")


def test_the_front_ends_stand_on_the_engine_and_not_on_each_other():
    # add, extend and trim decide which tokens and hand the engine a plan: the engine imports none of them,
    # and none of them imports another (a front-end that needs another's code has found engine code).
    rooms: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        rooms.setdefault(_room(module), set()).update(_room(d) for d in deps if _room(d) != _room(module))
    assert rooms["engine"].isdisjoint({*FRONT_ENDS, "cli", "explore"})
    for front in FRONT_ENDS:
        assert rooms[front].isdisjoint(FRONT_ENDS), f"{front} imports {sorted(rooms[front] & set(FRONT_ENDS))}"
    assert {"add", "extend"} <= {f for f in FRONT_ENDS if "engine" in rooms[f]}
