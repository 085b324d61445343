"""The package's layers point one way: each module imports only modules of its own layer or of a
lower one, and no modules import each other in a cycle.

    0  errors, protocol, formats, parsers, tokens, repository, sse    (what a request and a response are)
    1  settings, template, plan, tool_choice, choice_text, chunks, images, target   (preparing, building)
    2  service, anthropic, responses, embeddings                        (a request, prepared; the other APIs beside chat)
    3  transports, sender, engine                                    (reading the generation, sending)
    4  triton                                                           (the Python-backend glue)
The clients (`tritonchat.clients`: the client, the `tritonchat` command, the gateway) stand beside the server
side: they import only layer 0 and each other, and nothing on the server side imports them.
Imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "tritonchat"

LAYERS = {
    "tritonchat": 0,
    "errors": 0, "protocol": 0, "formats": 0, "parsers": 0, "tokens": 0, "repository": 0, "sse": 0,
    "settings": 1, "template": 1, "plan": 1, "tool_choice": 1, "choice_text": 1, "chunks": 1, "images": 1,
    "policy": 1, "completion_chunks": 1, "settings_docs": 1, "tokenizing": 1,
    "target": 1,
    "service": 2, "anthropic": 2, "responses": 2, "embeddings": 2,
    "transports": 3, "sender": 3, "engine": 3,
    "triton": 4,
}
CLIENT_SIDE = ("clients",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """The tritonchat modules `path` imports (a submodule named in `from . import x` counts as x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("tritonchat"):
                continue
            submodules = [f"{target}.{alias.name}" for alias in node.names
                          if (SRC / target.replace(".", "/") / f"{alias.name}.py").exists()
                          or (SRC / target.replace(".", "/") / alias.name / "__init__.py").exists()]
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("tritonchat"))
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path) for path in PACKAGE.rglob("*.py")}


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer(module: str) -> int | None:
    return LAYERS.get(top(module))


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in graph() if layer(m) is None and top(m) not in CLIENT_SIDE)
    assert unplaced == [], "place these modules in LAYERS (or CLIENT_SIDE)"


def test_imports_point_down():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if top(module) in CLIENT_SIDE:
                if top(target) not in CLIENT_SIDE and layer(target) != 0:
                    upward.append(f"{module} -> {target} (clients import only layer 0)")
            elif top(target) in CLIENT_SIDE:
                upward.append(f"{module} -> {target} (the server side never imports the clients)")
            elif layer(target) > layer(module):
                upward.append(f"{module} (layer {layer(module)}) -> {target} (layer {layer(target)})")
    assert sorted(upward) == []


def test_no_import_cycles():
    edges = graph()
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if target not in edges:
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a layer-0 module importing the service is caught."""
    fake = tmp_path / "src" / "tritonchat"
    (fake / "formats").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "service.py").write_text("")
    (fake / "formats" / "__init__.py").write_text("from ..service import Service\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path / "src")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    try:
        test_imports_point_down()
    except AssertionError as error:
        assert "tritonchat.formats (layer 0) -> tritonchat.service (layer 2)" in str(error)
    else:
        raise AssertionError("the upward import went unnoticed")
