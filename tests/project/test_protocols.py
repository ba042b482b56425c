"""One Protocol per client: no two Protocol classes in ``tracker`` declare a method of the same
name with the same parameters (a Protocol that needs more of the same client extends the one
that declares it, as :class:`tracker.triton.infer.ControlClient` extends ``InferClient``),
unless the method is listed in :data:`UNRELATED` with the reason. The checker is shown to fail
on a planted twin."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tracker"
#: methods that Protocols of different clients both declare, and why they are not one client
UNRELATED: dict[str, str] = {
    "close(self)": "a load's worker processes (measure/procs.py) and a Triton client",
}


def _is_protocol(base: ast.expr) -> bool:
    """``Protocol``, ``typing.Protocol`` or ``Protocol[T]``."""
    node = base.value if isinstance(base, ast.Subscript) else base
    return (isinstance(node, ast.Name) and node.id == "Protocol") or (
        isinstance(node, ast.Attribute) and node.attr == "Protocol")


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return f"{fn.name}({', '.join(names)})"


def protocol_twins(root: Path = PKG, unrelated: dict[str, str] = UNRELATED,
                   ) -> dict[str, list[str]]:
    """``method(params)`` -> the Protocols (``module.py:Class``) that declare it, for each
    method declared by more than one Protocol and not listed in ``unrelated``."""
    where: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ClassDef) and any(map(_is_protocol, node.bases))):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    where.setdefault(_signature(item), []).append(
                        f"{path.relative_to(root).as_posix()}:{node.name}")
    return {sig: found for sig, found in sorted(where.items())
            if len(found) > 1 and sig not in unrelated}


def test_no_protocol_is_declared_twice_for_one_client() -> None:
    found = protocol_twins(unrelated={})
    assert found.keys() >= UNRELATED.keys(), "an UNRELATED name is gone"
    assert {sig: where for sig, where in found.items() if sig not in UNRELATED} == {}


def test_the_checker_sees_a_planted_twin(tmp_path: Path) -> None:
    pkg = tmp_path / "tracker"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "one.py").write_text(
        "from typing import Protocol\n"
        "class Infers(Protocol):\n"
        "    def infer(self, request: object) -> None: ...\n"
        "class Control(Infers, Protocol):\n"  # extends it: no twin
        "    def load(self, name: str) -> None: ...\n")
    assert protocol_twins(pkg) == {}
    (pkg / "a" / "two.py").write_text(
        "import typing\n"
        "class Client(typing.Protocol):\n"
        "    def infer(self, request: object) -> None: ...\n"
        "    def close(self) -> None: ...\n"
        "class Plain:\n"  # not a Protocol: an implementation, not a twin
        "    def load(self, name: str) -> None: ...\n")
    twins = {"infer(self, request)": ["a/one.py:Infers", "a/two.py:Client"]}
    assert protocol_twins(pkg) == twins
    assert protocol_twins(pkg, {"infer(self, request)": "planted"}) == {}
