"""No function in ``tracker`` takes more than :data:`MAX_PARAMETERS` parameters: one that
needs more inputs takes a value object (a frozen dataclass built once, like the measurement
request of tracker/candidate/measurement.py). ``self`` and ``cls`` are not counted;
``*args`` and ``**kwargs`` count one each. The check is shown to fail on a planted function.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tracker"
MAX_PARAMETERS = 8

def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    named = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)
             if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def over(root: Path = PKG, most: int = MAX_PARAMETERS) -> dict[str, int]:
    """``path:function`` -> its parameters, for every function of ``root`` over ``most``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = parameters(node)
                if n > most:
                    found[f"{path.relative_to(root.parent)}:{node.name}"] = n
    return found


def test_no_function_takes_more_than_eight_parameters() -> None:
    assert over() == {}


def test_the_check_fails_on_a_planted_function(tmp_path: Path) -> None:
    pkg = tmp_path / "tracker"
    pkg.mkdir()
    (pkg / "planted.py").write_text(
        "def wide(a, b, c, d, e, f, g, h, i): ...\n"
        "def starred(a, b, c, d, e, f, g, *args, **kwargs): ...\n"
        "def eight(a, b, c, d, e, f, g, *, h): ...\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g, h): ...\n"
        "    @classmethod\n"
        "    def make(cls, a, b, c, d, e, f, g, h, i): ...\n"
        "async def waits(a, b, c, d, e, f, g, h, i, j): ...\n")
    assert over(pkg) == {"tracker/planted.py:wide": 9, "tracker/planted.py:starred": 9,
                         "tracker/planted.py:make": 9, "tracker/planted.py:waits": 10}
