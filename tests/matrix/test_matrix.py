"""The capability matrix (tests/matrix/table.py) holds together: every (kind, operation) pair
has a cell, every test a cell names exists (its file and its function, read with ast), every
refusal's test asserts the refusal's message, and docs/matrix.md is what the generator makes.
Holes are allowed for now; one test prints them. Nothing here starts a server."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pytest

from tests.matrix import table
from tests.matrix.table import KINDS, MATRIX, OPERATIONS, Cell, Hole, Refused, Works

FIX = f"regenerate it with `{table.COMMAND}`"
#: the most characters a cell's text may have in the docs table (readable on one screen)
MAX_NOTE = 60
MAX_HOLE = 110
MAX_WHY = 110

Function = ast.FunctionDef | ast.AsyncFunctionDef
#: modules whose tests run a real Triton without the ``triton`` mark, and how
UNMARKED_REAL = {
    "tests/tracking/test_mlflow_native.py": "its module fixture runs `tracker tune` in a "
                                            "subprocess, which starts the embedded Triton",
}
#: operations a ✔ may show without a server (``tracker check`` starts none for most kinds)
NO_SERVER_OPS = {"check"}


@cache
def _functions(path: Path) -> tuple[str, dict[str, Function]]:
    """The source of a test file and its test functions: ``name`` at the top level,
    ``Class::name`` in a class."""
    source = path.read_text(encoding="utf-8")
    found: dict[str, Function] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}::{item.name}"] = item
    return source, found


def _parametrized(function: Function) -> bool:
    return any("parametrize" in ast.unparse(d) for d in function.decorator_list)


def naming_problem(test_id: str, root: Path = table.REPO) -> str | None:
    """Why ``path::function`` (``[id]`` allowed on a parametrized test) names no test, or
    None when it does."""
    path, sep, name = test_id.partition("::")
    if not sep or not path.startswith("tests/") or not name:
        return "not of the form tests/<file>.py::<function>"
    file = root / path
    if not file.is_file():
        return f"no file {path}"
    base, bracket, _ = name.partition("[")
    function = _functions(file)[1].get(base)
    if function is None or not base.split("::")[-1].startswith("test"):
        return f"no test function {base} in {path}"
    if bracket and not _parametrized(function):
        return f"{base} is not parametrized, but the cell names an id of it"
    return None


def starts_triton(test_id: str, root: Path = table.REPO) -> bool:
    """Whether the test is marked ``triton`` (its function or its module's ``pytestmark``),
    or is in a module :data:`UNMARKED_REAL` names."""
    path, _, name = test_id.partition("::")
    if path in UNMARKED_REAL:
        return True
    source, functions = _functions(root / path)
    module = [ast.unparse(n.value) for n in ast.parse(source).body if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)]
    function = functions[name.partition("[")[0]]
    return any("mark.triton" in m for m in module) or any(
        "mark.triton" in ast.unparse(d) for d in function.decorator_list)


def refusal_problem(cell: Refused, root: Path = table.REPO) -> str | None:
    """Why ``cell``'s test does not show its refusal (None: it names a test whose body holds
    the refusal's message)."""
    if (why := naming_problem(cell.test, root)) is not None:
        return why
    path, _, name = cell.test.partition("::")
    source, functions = _functions(root / path)
    body = ast.get_source_segment(source, functions[name.partition("[")[0]]) or ""
    if cell.message not in body:
        return f"{name} does not assert the message {cell.message!r}"
    return None


def problems(matrix: Mapping[tuple[str, str], Cell], root: Path = table.REPO) -> list[str]:
    """One line per cell that names a test that is not there, or a refusal its test does not
    assert (empty: every cell holds)."""
    out = []
    for (kind, op), cell in matrix.items():
        where = f"{kind} x {op}"
        if isinstance(cell, Works):
            if not cell.tests:
                out.append(f"{where}: works, but names no test")
            out += [f"{where}: {test}: {why}" for test in cell.tests
                    if (why := naming_problem(test, root)) is not None]
        elif isinstance(cell, Refused) and (why := refusal_problem(cell, root)) is not None:
            out.append(f"{where}: {cell.test}: {why}")
    return out


# ---- the matrix -------------------------------------------------------------------------------

def test_every_kind_and_operation_pair_has_one_cell() -> None:
    kinds = [k.key for k in KINDS]
    ops = [o.key for o in OPERATIONS]
    assert len(set(kinds)) == len(kinds) and len(set(ops)) == len(ops)
    assert list(table.ROWS) == kinds, "a row per kind, in the kinds' order"
    for kind, row in table.ROWS.items():
        assert list(row) == ops, f"{kind}: a cell per operation, in the operations' order"
    assert set(MATRIX) == {(k, o) for k in kinds for o in ops}
    assert {o.group for o in OPERATIONS} == {g for g, _ in table.GROUPS}


def test_every_test_a_cell_names_exists() -> None:
    found = problems(MATRIX)
    assert not found, "cells that name no real test:\n" + "\n".join(found)


def test_every_refusal_names_the_test_that_asserts_it() -> None:
    refused = [c for c in MATRIX.values() if isinstance(c, Refused)]
    assert refused, "the table holds no refusal: the check below would check nothing"
    for cell in refused:
        assert refusal_problem(cell) is None, (cell, refusal_problem(cell))
        assert cell.why and cell.message


def test_every_works_cell_past_the_check_names_a_real_triton_test() -> None:
    """A ✔ is a test on a real Triton: each cell outside ``tracker check`` names at least one
    test marked ``triton`` (or in a module of :data:`UNMARKED_REAL`)."""
    bare = [f"{kind} x {op}: {cell.tests}" for (kind, op), cell in MATRIX.items()
            if isinstance(cell, Works) and op not in NO_SERVER_OPS
            and not any(starts_triton(test) for test in cell.tests)]
    assert not bare, "cells whose tests start no Triton:\n" + "\n".join(bare)
    assert not starts_triton(table.t("triton/test_formats.py",
                                     "test_each_format_reads_its_directory"))


def test_the_cells_are_short_enough_for_the_docs_table() -> None:
    long = []
    for (kind, op), cell in MATRIX.items():
        text, limit = ((cell.note, MAX_NOTE) if isinstance(cell, Works) else
                       (cell.why, MAX_WHY) if isinstance(cell, Refused) else
                       (cell.what, MAX_HOLE))
        if len(text) > limit or "|" in text or "\n" in text or "](" in text:
            long.append(f"{kind} x {op}: {len(text)} > {limit} or a pipe, newline or link: "
                        f"{text!r}")
    assert not long, "\n".join(long)


def test_the_holes_are_listed() -> None:
    """Allowed for now: printed (``pytest -s``), and the list is every Hole cell."""
    listed = table.holes()
    by_scan = [(k, o, c.what) for (k, o), c in MATRIX.items() if isinstance(c, Hole)]
    assert sorted(listed) == sorted(by_scan) and len(listed) == len(by_scan)
    print(f"\n{len(listed)} holes in the capability matrix:")
    for kind, op, what in listed:
        print(f"  {kind} x {op}: {what}")
    assert table.counts()["holes"] == len(listed)
    assert sum(table.counts().values()) == len(KINDS) * len(OPERATIONS)


# ---- the docs page ----------------------------------------------------------------------------

def test_the_docs_page_is_what_the_generator_makes() -> None:
    assert table.PAGE.is_file(), f"docs/matrix.md is missing; {FIX}"
    assert table.PAGE.read_text(encoding="utf-8") == table.page(), \
        f"docs/matrix.md and tests/matrix/table.py disagree; {FIX}"


def test_the_page_says_it_is_generated_and_shows_every_cell() -> None:
    text = table.page()
    assert "<!-- generated:" in text and table.COMMAND in text and "generated" in text
    widths = [sum(op.group == g for op in OPERATIONS) for g, _ in table.GROUPS]
    for kind in KINDS:  # a row in each table, a cell per column
        rows = [r for r in text.splitlines() if r.startswith(f"| {kind.name} |")]
        assert [r.count(" | ") + 1 for r in rows] == [w + 1 for w in widths], rows
    for cell in MATRIX.values():
        assert table.shown(cell) in text
    n = table.counts()
    assert f"{n['works']} cells ✔, {n['refused']} refused, {n['holes']} not yet" in text


def test_the_generator_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "matrix.md"
    assert table.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == table.page()
    assert "written" in capsys.readouterr().out
    assert table.main([str(out)]) == 0
    assert "unchanged" in capsys.readouterr().out


def test_the_generator_takes_an_option_for_no_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert table.main(["--help"]) == 0 and table.main(["-o", "x.md"]) == 2
    assert "usage:" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no page named after the option


# ---- the checker sees what is wrong -----------------------------------------------------------

def test_the_checker_fails_on_a_planted_missing_test() -> None:
    real = table.t("tuning/test_tune_study.py",
                   "test_refused_config_fails_the_trial_and_the_study_goes_on")
    planted: dict[tuple[str, str], Cell] = {
        ("onnx", "tune"): Works((real, table.t("tuning/test_tune_study.py", "test_nope"))),
        ("onnx", "report"): Works((table.t("tuning/test_gone.py", "test_report"),)),
        ("onnx", "rounds"): Works((f"{real}[a-b]",)),   # an id of a test without parameters
        ("onnx", "paired"): Works(()),
        ("onnx", "check"): Works(("tests/tuning/test_tune_study.py",)),
        ("bls", "pyfunc"): Refused("no such refusal words", "planted", real),
        ("bls", "deploy"): Refused("x", "planted", table.t("tuning/test_tune_study.py",
                                                           "test_missing")),
    }
    found = problems(planted)
    assert len(found) == 7, found
    assert any("onnx x tune" in p and "no test function test_nope" in p for p in found)
    assert any("onnx x report" in p and "no file tests/tuning/test_gone.py" in p for p in found)
    assert any("onnx x rounds" in p and "not parametrized" in p for p in found)
    assert any("onnx x paired: works, but names no test" in p for p in found)
    assert any("onnx x check" in p and "not of the form" in p for p in found)
    assert any("bls x pyfunc" in p and "does not assert the message" in p for p in found)
    assert any("bls x deploy" in p and "no test function test_missing" in p for p in found)
    # the real cells pass, and the planted one beside them is still seen
    assert problems({**MATRIX, ("onnx", "tune"): planted[("onnx", "tune")]}) == [
        p for p in found if p.startswith("onnx x tune")]


def test_a_parametrized_id_and_a_class_method_are_found(tmp_path: Path) -> None:
    tests = tmp_path / "tests" / "x"
    tests.mkdir(parents=True)
    (tests / "test_y.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_z(n):\n    pass\n"
        "\n\nclass TestK:\n    def test_m(self):\n        assert 'said so' in 'it said so'\n")
    assert naming_problem("tests/x/test_y.py::test_z[1]", tmp_path) is None
    assert naming_problem("tests/x/test_y.py::TestK::test_m", tmp_path) is None
    assert naming_problem("tests/x/test_y.py::TestK::test_gone", tmp_path) is not None
    refusal = Refused("said so", "a planted refusal", "tests/x/test_y.py::TestK::test_m")
    assert refusal_problem(refusal, tmp_path) is None
