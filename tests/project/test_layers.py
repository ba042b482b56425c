"""Layers point one way (docs/architecture.md): a module never imports from a layer above it.

Every module of the package has a layer (root modules included), no module is over 350 lines
and no function over 60 (issue 30 brought every module within them), and there is no import
circle inside ``tracker/``. The checker is shown to fail on
a violation of each rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "tracker"
MAX_LINES = 350
MAX_FUNCTION_LINES = 60

_ABOVE_SPEC = ("tracker.triton", "tracker.measure", "tracker.search", "tracker.tracking",
               "tracker.confirm", "tracker.deploy", "tracker.study", "tracker.cli")
_LOOP = ("tracker.study", "tracker.cli")
_CONFIRM_RECORD = ("tracker.triton", "tracker.measure", "tracker.search", "tracker.deploy",
                   "tracker.confirm.rounds", "tracker.confirm.command", *_LOOP)

#: the study package, bottom first: each module may import those before it, never one after
STUDY_ORDER = ("progress", "model_store", "joint", "measured", "check_stored", "check_outputs",
               "session", "check_default", "trial", "conclude", "loop", "profile")


def _study_above(name: str) -> tuple[str, ...]:
    later = STUDY_ORDER[STUDY_ORDER.index(name) + 1:]
    return (*(f"tracker.study.{m}" for m in later), "tracker.deploy", "tracker.cli")


# layer -> the tracker packages/modules it must never import. A layer is a package (its
# modules included) or a single module.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the bottom: plain tables and names, importing nothing of the package (errors aside)
    "tracker": ("tracker.",),  # the package's __init__
    "tracker.errors": ("tracker.",),
    "tracker.trial_attrs": ("tracker.",),
    "tracker.tags": ("tracker.",),
    "tracker.metrics": ("tracker.",),
    "tracker.launch_modes": ("tracker.",),
    "tracker.samplers": ("tracker.",),
    "tracker.serving": ("tracker.",),
    "tracker.feasibility": ("tracker.",),
    "tracker.redact": ("tracker.",),  # masks secrets in what any layer logs or prints
    # the spec package sits on the bottom
    "tracker.spec": _ABOVE_SPEC,
    "tracker.triton": ("tracker.measure", "tracker.search", "tracker.tracking", "tracker.deploy",
                       "tracker.confirm", *_LOOP),
    "tracker.measure": ("tracker.search", "tracker.tracking", "tracker.deploy", "tracker.confirm",
                        "tracker.triton.server", *_LOOP),
    "tracker.search": ("tracker.measure.loadgen", "tracker.tracking", "tracker.deploy",
                       "tracker.confirm",
                       "tracker.triton.server", *_LOOP),
    "tracker.tracking": ("tracker.triton.server", "tracker.triton.client",
                         "tracker.measure.loadgen", "tracker.search", "tracker.deploy",
                         "tracker.confirm.rounds", "tracker.confirm.command", *_LOOP),
    "tracker.deploy": ("tracker.search", "tracker.measure", "tracker.confirm.rounds",
                       "tracker.confirm.command", *_LOOP),
    # the study loop: one measured configuration, then a trial, then the loop around it
    "tracker.study": ("tracker.deploy", "tracker.cli"),  # the package's __init__
    **{f"tracker.study.{m}": _study_above(m) for m in STUDY_ORDER},
    "tracker.study.progress": ("tracker.",),
    "tracker.study.measured": (*_study_above("measured"), "tracker.triton.server.local",
                               "tracker.triton.server.docker", "tracker.triton.server.remote"),
    "tracker.study.model_store": (*_study_above("model_store"), "tracker.triton.server",
                                  "tracker.measure"),
    # the confirmation, one package in three layers: pure statistics at the bottom, the record
    # and its words beside tracking/, the rounds (measuring, on the study's server) beside
    # study/ (the loop calls them; ``tracker confirm`` is the study's conclusion)
    "tracker.confirm": ("tracker.",),
    "tracker.confirm.sequence": ("tracker.",),  # anytime-valid intervals
    "tracker.confirm.stats": ("tracker.",),  # the verdict's statistics
    "tracker.confirm.record": _CONFIRM_RECORD,
    "tracker.confirm.words": _CONFIRM_RECORD,
    "tracker.confirm.stopping": _CONFIRM_RECORD,  # when the rounds stop, read from the record
    "tracker.confirm.rounds": ("tracker.deploy", "tracker.cli", "tracker.study.loop",
                               "tracker.study.profile", "tracker.confirm.command"),
    "tracker.confirm.paired": ("tracker.deploy", "tracker.cli", "tracker.study.loop",
                               "tracker.study.profile", "tracker.confirm.command",
                               "tracker.confirm.rounds"),
    "tracker.confirm.command": ("tracker.deploy", "tracker.cli", "tracker.study.loop"),
    # the command line: everything; its parameter helpers nothing of the package
    "tracker.cli": (),
    "tracker.cli.params": ("tracker.",),
}

ALLOWED: dict[str, tuple[str, ...]] = {
    "tracker.errors": ("tracker.errors",),
    "tracker.feasibility": ("tracker.errors",),
    "tracker.serving": ("tracker.errors",),
    "tracker.confirm.stats": ("tracker.confirm.sequence",),
}

#: the spec package's helpers never import its root (tracker/spec/__init__.py imports them)
SPEC_HELPERS = ("tracker.spec.sections", "tracker.spec.checks", "tracker.spec.messages",
                "tracker.spec.fields", "tracker.spec.model_section", "tracker.spec.search_section")


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


def _layer(module: str) -> str | None:
    if module in FORBIDDEN:
        return module
    for layer in sorted(FORBIDDEN, key=len, reverse=True):
        if layer != "tracker" and module.startswith(layer + "."):
            return layer
    return None


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def violations(path: Path, module: str) -> list[str]:
    """The imports of ``path`` (module ``module``) that its layer forbids."""
    layer = _layer(module)
    if layer is None:
        return [f"{module} has no layer"]
    allowed = ALLOWED.get(layer, ())
    bad = sorted({name for name in _imports(path) for prefix in FORBIDDEN[layer]
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
    assert not bad, f"{module} (layer {_layer(module)}) imports from a layer above it: {bad}"


def test_every_module_has_a_layer() -> None:
    missing = [_module_name(p) for p in MODULES if _layer(_module_name(p)) is None]
    assert not missing, f"modules without a layer in FORBIDDEN: {missing}"


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    """The checker itself must be able to fail: an upward import is flagged for its layer,
    a module outside every layer is flagged, a spec helper importing the spec root is."""
    fake = tmp_path / "x.py"
    fake.write_text("from tracker.search import space\nimport tracker.study.loop\n")
    names = _imports(fake)
    assert "tracker.search" in names and "tracker.study.loop" in names
    assert violations(fake, "tracker.measure.fake") == [
        "tracker.search", "tracker.search.space", "tracker.study.loop"]
    assert violations(fake, "tracker.cli") == []
    assert violations(fake, "tracker.brand_new") == ["tracker.brand_new has no layer"]
    helper = tmp_path / "h.py"
    helper.write_text("from tracker.spec import StudySpec\n")
    assert violations(helper, "tracker.spec.checks") == ["from tracker.spec import ..."]


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
    the trial rows both read now live in tracking/rows.py)."""
    circle = _cycle(_graph(PKG, types=True))
    assert not circle, "import circle (type hints included): " + " -> ".join(circle)


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
