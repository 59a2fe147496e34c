"""The package's layers: no import cycle among its modules, and each layer imports only those below it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

ROOTS = {"tensorwire": REPO / "codec", "tensorwire.transports": REPO / "transports"}


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join((package, *parts))] = path
    return files


def _imported_at_load(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports when it is loaded: module-level imports, outside
    ``if TYPE_CHECKING:`` (imports inside functions run later, on use)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)

    visit(ast.parse(path.read_text(), str(path)).body)
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    files = _module_files()
    known = set(files)
    return {name: _imported_at_load(path, known) - {name} for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    graph = _graph()
    assert len(graph) > 60 and "tensorwire._body" in graph["tensorwire._encoder"]
    # a package that imports (re-exports) its own submodules is not a cycle: Python loads the
    # package first, then the submodule
    own = {m: {n for n in deps if not n.startswith(m + ".")} for m, deps in graph.items()}
    assert _cycle(own) is None


def test_the_bottom_layers_import_nothing_above_them() -> None:
    graph = _graph()
    assert graph["tensorwire.errors"] <= {"tensorwire"}
    assert graph["tensorwire.options"] <= {"tensorwire", "tensorwire.errors"}
    tools = ("tensorwire.schema", "tensorwire.gen", "tensorwire.compat", "tensorwire.lint")
    schema_tools = [m for m in graph if m.startswith(tools)]
    assert len(schema_tools) >= 15
    # what the schema compiler, code generator, compat checker and linter stand on (all torch-free)
    below = {"tensorwire", "tensorwire._api", "tensorwire.dtypes", "tensorwire.errors", "tensorwire.rules"}
    below |= {"tensorwire._files"}  # how a schema file is read
    assert graph["tensorwire._files"] <= {"tensorwire"}
    below |= {"tensorwire.registry", "tensorwire._contract"}  # for the run-time classes of gen._runtime
    for module in schema_tools:
        assert {m for m in graph[module] if not m.startswith(tools)} <= below, module


def test_no_transport_imports_another_transport() -> None:
    graph = _graph()
    concrete = {f"tensorwire.transports.{n}" for n in ("inline", "shm", "cuda_shm", "torch_queue")}
    extends = {"tensorwire.transports.cuda_shm": {"tensorwire.transports.shm"}}  # CudaShmTransport is one
    for module in concrete | {"tensorwire.transports.base"}:
        assert graph[module] & (concrete - {module}) == extends.get(module, set()), module


def test_only_the_zmq_layer_imports_pyzmq_and_nothing_imports_that_layer() -> None:
    files = _module_files()
    graph = _graph()
    known = set(files) | {"zmq"}
    with_pyzmq = {name for name, path in files.items() if "zmq" in _imported_at_load(path, known)}
    pyzmq_modules = ("_channel", "_incoming", "_outgoing", "_peers", "_rpc", "_sent", "_sockets")
    assert with_pyzmq == {f"tensorwire.zmq.{n}" for n in pyzmq_modules}
    layer = {m for m in graph if m == "tensorwire.zmq" or m.startswith("tensorwire.zmq.")}
    assert len(layer) == 10
    for module, deps in graph.items():
        if module not in layer:
            assert not deps & layer, module
