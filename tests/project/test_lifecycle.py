"""One process lifecycle (tracker/lifecycle.py): the package defines one class named
``Interrupted``, and no module but tracker/lifecycle.py installs a signal handler or raises a
signal (``signal.signal``, ``signal.raise_signal``, also under another name). Each checker is
shown to fail on a planted case."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tracker"
HOME = "lifecycle.py"
FORBIDDEN = ("signal", "raise_signal")


@functools.cache
def _modules(root: Path) -> tuple[tuple[str, ast.Module], ...]:
    """(path under ``root``, syntax tree) of every module, parsed once."""
    return tuple((path.relative_to(root).as_posix(), ast.parse(path.read_text()))
                 for path in sorted(root.rglob("*.py")))


def classes_named(name: str, root: Path = PKG) -> list[str]:
    """``module:line`` for every class ``name`` defined in ``root``."""
    return [f"{rel}:{node.lineno}" for rel, tree in _modules(root) for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name == name]


def _signal_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names the ``signal`` module is bound to, and the names bound to its forbidden
    functions (``from signal import signal as on``)."""
    modules: set[str] = set()
    functions: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "signal"}
        elif isinstance(node, ast.ImportFrom) and node.module == "signal":
            functions |= {a.asname or a.name for a in node.names if a.name in FORBIDDEN}
    return modules, functions


def signal_calls(root: Path = PKG) -> list[str]:
    """``module:line`` for every call of ``signal.signal`` or ``signal.raise_signal`` outside
    tracker/lifecycle.py."""
    out: list[str] = []
    for rel, tree in _modules(root):
        if rel == HOME:
            continue
        modules, functions = _signal_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in FORBIDDEN
                    and isinstance(func.value, ast.Name) and func.value.id in modules) \
                    or (isinstance(func, ast.Name) and func.id in functions):
                out.append(f"{rel}:{node.lineno}")
    return out


def test_one_interrupted_class() -> None:
    found = classes_named("Interrupted")
    assert [place.partition(":")[0] for place in found] == [HOME], found


def test_only_the_lifecycle_module_touches_signal_handlers() -> None:
    assert signal_calls() == []


def test_the_checkers_see_a_planted_case(tmp_path: Path) -> None:
    (tmp_path / HOME).write_text("import signal\nclass Interrupted(KeyboardInterrupt): ...\n"
                                 "signal.signal(signal.SIGINT, signal.SIG_IGN)\n")
    (tmp_path / "a.py").write_text("import signal as s\nclass Interrupted(Exception): ...\n"
                                   "s.raise_signal(s.SIGTERM)\ns.getsignal(s.SIGINT)\n")
    (tmp_path / "b.py").write_text("from signal import signal as on, SIGINT, SIG_DFL\n"
                                   "def f() -> None:\n    on(SIGINT, SIG_DFL)\n")
    assert classes_named("Interrupted", tmp_path) == ["a.py:2", f"{HOME}:2"]
    assert signal_calls(tmp_path) == ["a.py:3", "b.py:3"]
