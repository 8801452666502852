"""The core's shape, as a contributor reads it: no import circle among the modules of hiera_core and hiera_judge,
and a judge library that knows tasks and verdicts but not runs."""

import ast
from pathlib import Path

import hiera_core
import hiera_judge

PACKAGES = {"hiera_core": Path(hiera_core.__file__).parent, "hiera_judge": Path(hiera_judge.__file__).parent}


def _imports(path: Path, name: str) -> set[str]:
    """The modules `path` imports when it is loaded (not those imported inside a function or only for
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


def _modules() -> dict[str, Path]:
    return {
        ".".join((package, *path.relative_to(folder).with_suffix("").parts)).removesuffix(".__init__"): path
        for package, folder in PACKAGES.items()
        for path in folder.rglob("*.py")
    }


def test_no_module_of_the_core_imports_itself_back_through_others():
    modules = _modules()
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


def test_the_judge_library_knows_tasks_and_verdicts_but_not_runs():
    """hiera_judge imports of the core only its records, their converter and the plugin surface (a judge process
    rebuilds its workload's harness from it); never the engine, the store, the session or the run's config."""
    modules = _modules()
    core = {name for name in modules if name.startswith("hiera_core.")}
    used = set()
    for name, path in modules.items():
        if name.startswith("hiera_judge"):
            used |= _imports(path, name) & core
    assert used <= {"hiera_core.records", "hiera_core.serialization", "hiera_core.protocols"}, sorted(used)
    assert not _imports(modules["hiera_judge"], "hiera_judge") - {"hiera_judge"}  # `python -m hiera_judge.sandbox` loads it alone
