"""The layout docs/DEVELOPING.md draws: imports flow one way (tests, bench, experiments and
recipes use the package; the package imports none of them) and no module imports another
that imports it back, directly or around a longer circle, lazily inside a function or not."""

import ast
import os

import pytest
from conftest import REPO

PACKAGES = ("luong_plugin", "experiments")  # imported by their dotted names
SCRIPT_DIRS = ("bench",)  # scripts that import their siblings by bare name


def _modules():
    """{module name: path} of every Python file in the package, experiments/ and bench/."""
    found = {}
    for top in PACKAGES:
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(root, name), REPO)[:-3]
                    parts = rel.split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    found[".".join(parts)] = os.path.join(root, name)
    for top in SCRIPT_DIRS:
        for name in os.listdir(os.path.join(REPO, top)):
            if name.endswith(".py"):
                found[f"{top}:{name[:-3]}"] = os.path.join(REPO, top, name)
    return found


MODULES = _modules()


def _imports(module: str, path: str) -> set:
    """The project modules ``module`` imports, anywhere in the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module.split(".") if not path.endswith("__init__.py") else module.split(".") + [""]
    script_dir = module.split(":")[0] if ":" in module else None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: -node.level] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for name in names:
        if script_dir and f"{script_dir}:{name}" in MODULES:
            found.add(f"{script_dir}:{name}")
        elif name in MODULES and name != module:
            found.add(name)
    # a module imports its package's __init__ too, but that is no edge of its own
    return {m for m in found if not module.startswith(m + ".")}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def test_the_package_imports_no_experiment_bench_or_recipe():
    for module, targets in GRAPH.items():
        if module.startswith("luong_plugin"):
            outside = {t for t in targets if not t.startswith("luong_plugin")}
            assert not outside, f"{module} imports {outside}"


def _cycle_from(start):
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in GRAPH[node]:
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_circle(module):
    cycle = _cycle_from(module)
    assert cycle is None, " -> ".join(cycle)


def test_recipes_hold_recipes_only():
    """What a user runs: a recipe's scripts are entry points that nothing imports (the
    studies live in experiments/, shared code in the package)."""
    recipe_files = set()
    for root, _, files in os.walk(os.path.join(REPO, "recipes")):
        recipe_files.update(name[:-3] for name in files if name.endswith(".py"))
    for top in ("luong_plugin", "experiments", "bench", "tests", "recipes"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        used = {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and not node.level:
                        used = {(node.module or "").split(".")[0]}
                    else:
                        continue
                    assert "recipes" not in used and not (
                        used & recipe_files
                    ), f"{os.path.join(root, name)} imports a recipe's script: {used}"


def test_the_graph_sees_imports():
    """The check itself: known edges are found (relative, dotted and bare-name imports)."""
    assert "luong_plugin.modules.precision" in GRAPH["luong_plugin.modules.luong_decoder"]
    assert "experiments.harness" in GRAPH["experiments.compare"]
    assert "bench:measure" in GRAPH["bench:throughput"]
