"""The package's layout: no import cycles between lyasched modules, and no module that nothing
reaches.

The import graph counts every import in a module, at any nesting level (function-level ones
too), absolute and relative, but not the bodies of ``if TYPE_CHECKING:`` blocks. ``from
lyasched.x import y`` where ``y`` is a submodule is an edge to ``lyasched.x.y``, otherwise to
``lyasched.x``. (A package's ``__init__`` that imports its own submodules is no cycle: a
submodule's edge to its package counts only when it imports names from the package.)

Reachability also follows the lazy references a module makes by name (a string constant
``"lyasched.x.y"`` or ``"lyasched.x.y:attr"``, as the ``lyasched`` command group's
subcommands and the policy registry load their modules); cycles count real imports only.

Entry points: the console scripts in pyproject.toml, every ``python -m lyasched...`` that the
job templates, launch scripts and docs run, and the in-job library modules that users' training
scripts import (``lyasched.job.*``).
"""

from __future__ import annotations

import ast
import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "lyasched")

# the in-job library: what a user's training script imports (jobscripts/README.md, docs/lyasub.md)
IN_JOB_API = ("lyasched.job.steptimes", "lyasched.job.checkpoint", "lyasched.job.goodput")


def _modules() -> dict[str, str]:
    """Dotted module name -> file path, for every module under lyasched/."""
    mods: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), ROOT)[: -len(".py")]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = os.path.join(dirpath, fn)
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, outside ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, mods: dict[str, str]) -> str | None:
    """The longest known module that ``name`` is or lies inside."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def _with_parents(name: str, mods: dict[str, str]) -> set[str]:
    """A module and the packages that importing it runs."""
    out = set()
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        m = ".".join(parts[:i])
        if m in mods:
            out.add(m)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        is_pkg = os.path.basename(path) == "__init__.py"
        for node in _imports(tree):
            targets: set[str] = set()
            if isinstance(node, ast.Import):
                for alias in node.names:
                    t = _resolve(alias.name, mods)
                    if t:
                        targets.add(t)
            else:
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    if node.level > 1:
                        base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                base_mod = _resolve(src, mods)
                if base_mod is None:
                    continue
                for alias in node.names:
                    sub = f"{src}.{alias.name}"
                    targets.add(sub if sub in mods else base_mod)
            graph[mod] |= targets - {mod}
    return graph


_LAZY = re.compile(r"^(lyasched(?:\.\w+)+)(?::\w+)?$")


def lazy_refs() -> dict[str, set[str]]:
    """Modules each module names in a string constant (loaded by importlib)."""
    mods = _modules()
    refs: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = _LAZY.match(node.value)
                if m and m.group(1) in mods:
                    refs[mod].add(m.group(1))
    return refs


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(sccs)


def _cycle_in(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through the component's first module (for the failure message)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def entry_points() -> set[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    eps = {v.split(":")[0] for v in project.get("scripts", {}).values()}
    pat = re.compile(r"python3?\s+(?:-\S+\s+)*-m\s+(lyasched(?:\.\w+)*)")
    for top in ("lyasched/templates", "slurm", "jobscripts", "docs", "benchmarks"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "data")]
            for fn in filenames:
                try:
                    with open(os.path.join(dirpath, fn), encoding="utf-8") as f:
                        text = f.read()
                except (UnicodeDecodeError, OSError):
                    continue
                eps |= set(pat.findall(text))
    eps |= set(IN_JOB_API)
    return eps


def test_graph_sees_nested_and_relative_imports():
    graph = import_graph()
    assert "lyasched.config" in graph["lyasched.service"]
    # packages are modules of the graph too
    assert "lyasched.policy" in graph


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    msg = "\n".join(
        f"  {len(c)} modules: {', '.join(c)}\n    e.g. {' -> '.join(_cycle_in(c, graph))}"
        for c in cycles
    )
    assert not cycles, f"{len(cycles)} import cycle(s) in lyasched:\n{msg}"


def test_entry_points_exist():
    mods = _modules()
    missing = sorted(
        e
        for e in entry_points()
        if e not in mods and f"{e}.__main__" not in mods and e.startswith("lyasched")
    )
    assert not missing, f"entry points that are no module: {missing}"


def test_every_module_reachable_from_an_entry_point():
    graph = import_graph()
    for mod, refs in lazy_refs().items():
        graph[mod] |= refs
    mods = _modules()
    todo = []
    for e in entry_points():
        todo += [m for m in (e, f"{e}.__main__") if m in mods]
        todo += list(_with_parents(e, mods))
    seen = set(todo)
    while todo:
        v = todo.pop()
        # importing a module runs the packages above it
        for w in graph[v] | _with_parents(v, mods):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    unreachable = sorted(set(graph) - seen)
    assert not unreachable, f"modules no entry point reaches: {unreachable}"
