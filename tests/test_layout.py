"""The core's shape, as a contributor reads it: no import circle among hiera_core's modules."""

import ast
from pathlib import Path

import hiera_core

CORE = Path(hiera_core.__file__).parent


def _imports(path: Path, name: str) -> set[str]:
    """The hiera_core modules `path` imports when it is loaded (not those imported inside a function or only for
    type checking)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


def test_no_module_of_the_core_imports_itself_back_through_others():
    modules = {}
    for path in CORE.rglob("*.py"):
        name = ".".join(("hiera_core", *path.relative_to(CORE).with_suffix("").parts)).removesuffix(".__init__")
        modules[name] = path
    graph = {name: (_imports(path, name) & set(modules)) - {name} for name, path in modules.items()}

    def circle_from(start):
        seen, stack = set(), [(start, [start])]
        while stack:
            name, trail = stack.pop()
            for nxt in graph[name]:
                if nxt == start:
                    return [*trail, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(graph)) if c]
    assert circles == [], " ; ".join(" -> ".join(c) for c in circles)
