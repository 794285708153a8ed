"""The package's shape (docs/architecture.md): no module over 350 lines, no import circle (imports inside
functions count too), the typed errors' exit codes."""
from __future__ import annotations

import ast
from pathlib import Path

from kernellab import ROOT

PACKAGE = ROOT / "src" / "kernellab"
LIMIT = 350


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kernellab modules `name` imports anywhere in its file (a name taken from a package that is a
    submodule counts as that submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def test_no_module_is_over_350_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > LIMIT}
    assert not long, f"split these by job (docs/architecture.md): {long}"


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    # A package's __init__ that only hands its submodules' names on is its face, not a room: its edges to its
    # own submodules do not make a circle with them.
    for m, p in modules.items():
        if p.name == "__init__.py":
            graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles))[:10])


WINGS = ("image", "container", "ops", "watch", "nsight")


def test_a_wings_face_imports_nothing() -> None:
    """image/, container/, ops/, watch/ and nsight/ name their modules in a docstring and import none, so a low
    layer that needs kernellab.image.targets does not load the image build with it."""
    heavy = {}
    for wing in WINGS:
        tree = ast.parse((PACKAGE / wing / "__init__.py").read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if body or not ast.get_docstring(tree):
            heavy[wing] = [type(n).__name__ for n in body] or ["no docstring naming its modules"]
    assert not heavy, f"a wing's face holds only its docstring: {heavy}"


def test_every_module_of_a_wing_is_named_on_its_face() -> None:
    missing = {}
    for wing in WINGS:
        face = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())) or ""
        names = {p.stem for p in (PACKAGE / wing).glob("*.py") if p.stem not in ("__init__", "__main__")}
        names |= {p.parent.name + "/" for p in (PACKAGE / wing).glob("*/__init__.py")}
        missing[wing] = sorted(n for n in names if n not in face.split())
    assert not any(missing.values()), f"name these on the wing's face: {missing}"
