"""Layers point one way (docs/architecture.md): the packages of ``tracker`` are stacked in
:data:`TIERS`, and a module imports only from tiers below its own and from its own package
(lazy imports and type hints included). A few finer rules (:data:`ALSO_FORBIDDEN`) keep a
package off parts of a lower one. No module is over 600 lines, no function over 60, and there
is no import circle, between modules or between packages. The checker is shown to fail on a
violation of each rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "tracker"
#: a module is split where a concept ends; this bound only catches a file that holds several
MAX_LINES = 600
MAX_FUNCTION_LINES = 60

#: the package's root modules: the shared vocabulary (errors, tags, the metric catalog, ...)
ROOT_MODULES = ("errors", "trial_record", "tags", "metrics", "launch_modes", "samplers",
                "serving", "feasibility", "redact", "lifecycle")

#: the packages, bottom first; packages in one tier never import each other
TIERS: tuple[tuple[str, ...], ...] = (
    ROOT_MODULES,                      # plain tables and names
    ("spec",),                         # the study spec
    ("verdict",),                      # the statistics of the verdict, and its words
    ("triton",),                       # Triton itself: configs, repositories, client, servers
    ("measure",),                      # load and measurement
    ("search", "tracking"),            # Optuna's side; MLflow's side
    ("candidate",),                    # one candidate configuration served and measured
    ("invocation",),                   # what one command invocation sets up: the session
    ("outputs",),                      # the output check
    ("conclusion",),                   # the end of a study: report, best trial, summary
    ("confirm", "deploy", "profile"),  # the confirmation; deployment; tracker profile
    ("tuning",),                       # tracker tune: the loop, one trial, then confirm
    ("peers",),                        # Model Analyzer's commands, run as studies
    ("cli",),                          # the command line
)

#: finer rules inside the order: layer -> what it must never import although it is lower
ALSO_FORBIDDEN: dict[str, tuple[str, ...]] = {
    "tracker.measure": ("tracker.triton.server",),
    "tracker.search": ("tracker.measure.loadgen", "tracker.triton.server"),
    "tracker.tracking": ("tracker.triton.server", "tracker.triton.client",
                         "tracker.measure.loadgen"),
    "tracker.deploy": ("tracker.search", "tracker.measure"),
    "tracker.candidate.measurement": ("tracker.triton.server.local", "tracker.triton.server.docker",
                                 "tracker.triton.server.remote"),
    "tracker.candidate.model_store": ("tracker.triton.server", "tracker.measure"),
    "tracker.invocation.progress": ("tracker.",),
    "tracker.cli.params": ("tracker.",),
    "tracker": ("tracker.",),  # the package's __init__
}

ALLOWED: dict[str, tuple[str, ...]] = {
    "tracker.feasibility": ("tracker.errors",),
    "tracker.serving": ("tracker.errors",),
    "tracker.lifecycle": ("tracker.errors",),
}


#: the spec package's helpers never import its root (tracker/spec/__init__.py imports them)
SPEC_HELPERS = ("tracker.spec.sections", "tracker.spec.space_rules", "tracker.spec.messages",
                "tracker.spec.fields", "tracker.spec.model_section", "tracker.spec.search_section")


def _tier_of(package: str) -> int | None:
    for i, tier in enumerate(TIERS):
        if package in tier:
            return i
    return None


def _package(module: str) -> str | None:
    """The top-level part of ``tracker`` a module belongs to (``tracker.x.y`` -> ``x``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tracker" else None


def _forbidden(module: str) -> tuple[str, ...]:
    """Every ``tracker`` name ``module`` must not import."""
    pkg = _package(module)
    if pkg is None:
        return ALSO_FORBIDDEN["tracker"]
    tier = _tier_of(pkg)
    if tier is None:
        return ()
    out = [f"tracker.{p}" for t in TIERS[tier:] for p in t if p != pkg]
    if pkg in ROOT_MODULES:  # a root module imports nothing of the package
        out = ["tracker."]
    for layer in sorted(ALSO_FORBIDDEN, key=len):
        if layer != "tracker" and (module == layer or module.startswith(layer + ".")):
            out += ALSO_FORBIDDEN[layer]
    return tuple(out)


def _module_name(path: Path, root: Path = PKG) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def violations(path: Path, module: str) -> list[str]:
    """The imports of ``path`` (module ``module``) that its tier forbids."""
    pkg = _package(module)
    if pkg is not None and _tier_of(pkg) is None:
        return [f"{module} has no layer"]
    allowed = ALLOWED.get(module, ())
    bad = sorted({name for name in _imports(path) for prefix in _forbidden(module)
                  if _matches(name, prefix) and not any(_matches(name, a) for a in allowed)})
    if module in SPEC_HELPERS:
        tree = ast.parse(path.read_text())
        bad += [f"from {n.module} import ..." for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module == "tracker.spec"]
    return bad


MODULES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_upward_imports(path: Path) -> None:
    module = _module_name(path)
    bad = violations(path, module)
    assert not bad, f"{module} (package {_package(module)}) imports from above it: {bad}"


def test_every_module_has_a_layer() -> None:
    missing = [_module_name(p) for p in MODULES
               if (pkg := _package(_module_name(p))) is not None and _tier_of(pkg) is None]
    assert not missing, f"modules whose package is in no tier of TIERS: {missing}"


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    """The checker itself must be able to fail: an upward import is flagged for its layer,
    a module outside every layer is flagged, a spec helper importing the spec root is."""
    fake = tmp_path / "x.py"
    fake.write_text("from tracker.search import space\nimport tracker.tuning.loop\n")
    names = _imports(fake)
    assert "tracker.search" in names and "tracker.tuning.loop" in names
    assert violations(fake, "tracker.measure.fake") == [
        "tracker.search", "tracker.search.space", "tracker.tuning.loop"]
    assert violations(fake, "tracker.cli") == []
    assert violations(fake, "tracker.brand_new") == ["tracker.brand_new has no layer"]
    helper = tmp_path / "h.py"
    helper.write_text("from tracker.spec import StudySpec\n")
    assert violations(helper, "tracker.spec.space_rules") == ["from tracker.spec import ..."]
    # packages of one tier never import each other: the deploy and the confirmation
    peer = tmp_path / "p.py"
    peer.write_text("def f():\n    from tracker.confirm import rounds\n")
    assert violations(peer, "tracker.deploy.steps") == ["tracker.confirm", "tracker.confirm.rounds"]
    assert violations(peer, "tracker.tuning.tune") == []
    root = tmp_path / "r.py"
    root.write_text("from tracker.errors import SpecError\n")
    assert violations(root, "tracker.tags") == ["tracker.errors", "tracker.errors.SpecError"]


def test_every_package_is_in_a_tier() -> None:
    """A new package gets its place in the order before it lands (or this fails)."""
    found = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    found |= {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    placed = {name for tier in TIERS for name in tier}
    assert found - placed == set(), f"not in TIERS: {sorted(found - placed)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    rel = path.relative_to(PKG).as_posix()
    assert lines <= MAX_LINES, f"{rel} has {lines} lines; split it (at most {MAX_LINES})"


def long_functions(root: Path = PKG, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``module:function`` -> lines, for every function longer than ``limit`` lines."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    out[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return out


def test_functions_stay_short(tmp_path: Path) -> None:
    long = long_functions()
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long}"
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 60)
    assert long_functions(tmp_path) == {"m.py:f": 61}


def _imported(tree: ast.AST, skip: bool = False, types: bool = False) -> list[str]:
    """The names imported in ``tree`` (TYPE_CHECKING blocks left out unless ``types``: they
    never run, but two modules that need each other's types are one concept split in two)."""
    names: list[str] = []
    for child in ast.iter_child_nodes(tree):
        hidden = skip or (not types and isinstance(child, ast.If)
                          and "TYPE_CHECKING" in ast.dump(child.test))
        if isinstance(child, ast.Import) and not hidden:
            names += [a.name for a in child.names]
        elif isinstance(child, ast.ImportFrom) and not hidden and child.module \
                and child.level == 0:
            names += [child.module, *(f"{child.module}.{a.name}" for a in child.names)]
        names += _imported(child, hidden, types)
    return names


def _graph(root: Path, types: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at import time or lazily in a function
    (``types``: for type hints too)."""
    mods = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        out: set[str] = set()
        for name in _imported(ast.parse(path.read_text()), types=types):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name not in (module, root.name):
                out.add(name)
        graph[module] = out
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (empty when there is none)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return []


def test_no_import_circle() -> None:
    circle = _cycle(_graph(PKG))
    assert not circle, "import circle: " + " -> ".join(circle)


def test_no_import_circle_through_type_hints() -> None:
    """Not even through TYPE_CHECKING imports (plots.py and report.py were such a circle:
    the trial rows both read now live in tracking/entry_names.py)."""
    circle = _cycle(_graph(PKG, types=True))
    assert not circle, "import circle (type hints included): " + " -> ".join(circle)


def _package_graph(root: Path) -> dict[str, set[str]]:
    """Top-level package -> the top-level packages its modules import (lazily and for type
    hints too)."""
    out: dict[str, set[str]] = {}
    for module, deps in _graph(root, types=True).items():
        here = _package(module) or module
        out.setdefault(here, set()).update(
            d for d in ((_package(m) or m) for m in deps) if d != here)
    return out


def test_no_import_circle_between_packages() -> None:
    circle = _cycle(_package_graph(PKG))
    assert not circle, "import circle between packages: " + " -> ".join(circle)


def test_circle_check_sees_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "tracker"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from tracker.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from tracker.a import y\n")
    assert _cycle(_graph(pkg)) == ["tracker.a", "tracker.b", "tracker.a"]
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from tracker.a import y\n")
    assert _cycle(_graph(pkg)) == []  # at run time there is none
    assert _cycle(_graph(pkg, types=True)) == ["tracker.a", "tracker.b", "tracker.a"]
    (pkg / "b.py").write_text("")
    for name in ("p", "q"):
        (pkg / name).mkdir()
        (pkg / name / "__init__.py").write_text("")
    (pkg / "p" / "m.py").write_text("from tracker.q.n import z\n")
    (pkg / "q" / "n.py").write_text("def g():\n    from tracker.p.m import w\n")
    assert _cycle(_package_graph(pkg)) == ["p", "q", "p"]
