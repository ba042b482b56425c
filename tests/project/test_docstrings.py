"""Every module opens with a docstring that says what it holds, and what it names exists.

A module docstring (and docs/architecture.md) that names a file (``tracker/tuning/trial.py``,
``search/sweep_plan.py``, ``trial.py``), a module or attribute (``tracker.search.optuna_study``)
or a Sphinx role (``:func:`pick_best_level```) that is gone misleads the next reader: renames
and splits must carry the docstrings along. The checks are shown to fail on each kind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.project.test_architecture import missing_names

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "tracker"
MODULES = sorted(PKG.rglob("*.py"))

#: file names a docstring may give that are not files of this repository: a Python-backend
#: model's own file, NVIDIA's plugin script, a file inside a logged MLflow model
NOT_OURS = frozenset({"model.py", "publish_model_to_mlflow.py", "code/tracker_onnx_pyfunc.py"})

_FILE = re.compile(r"(?<![\w/.<>~-])((?:[\w-]+/)*[\w-]+\.py|(?:tracker|tests|benchmarks|docs)"
                   r"/[\w/.-]*\w)(?![\w/<])")
_ROLE = re.compile(r":(?:func|meth|class|data|attr|exc|mod):`~?([\w.]+)`")


def missing_files(text: str, folder: Path, repo: Path = REPO) -> list[str]:
    """File paths in ``text`` found neither in ``folder`` nor in a folder above it (up to
    ``repo``); ``<placeholder>`` paths and :data:`NOT_OURS` are left alone."""
    roots = [folder, *(p for p in folder.parents if p == repo or repo in p.parents)]
    return sorted({name for name in _FILE.findall(text) if name not in NOT_OURS
                   and not any((root / name).exists() for root in roots)})


def _literals(root: Path = PKG) -> set[str]:
    """``tracker.*`` strings of the package (tag names, labels): dotted, but not modules."""
    return {node.value for path in root.rglob("*.py") for node in ast.walk(ast.parse(
        path.read_text())) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.startswith("tracker.")}


LITERALS = _literals()


def missing_modules(text: str, literals: set[str]) -> list[str]:
    """``tracker.x.y`` names in ``text`` that neither import nor are a tag's name (or its
    prefix, as in ``tracker.constraint.<metric>``)."""
    return [name for name in missing_names(text)
            if not any(lit == name or lit.startswith(name + ".") for lit in literals)]


def _defined(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level names -> the names a class defines (empty for anything else)."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body
                              if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef |
                                            ast.ClassDef)}
            out[node.name] |= {t.id for n in node.body if isinstance(n, ast.AnnAssign | ast.Assign)
                               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                               if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = set()
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update({t.id: set() for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
        elif isinstance(node, ast.If):  # TYPE_CHECKING imports, version switches
            out.update(_defined(ast.Module(body=node.body + node.orelse, type_ignores=[])))
    return out


def missing_roles(text: str, tree: ast.Module) -> list[str]:
    """``:func:`name``` and the like naming what ``tree`` (the module) does not define;
    dotted names outside the package (``mlflow.MlflowClient``) are left alone, and
    ``tracker.*`` ones go to :func:`missing_modules`."""
    defined = _defined(tree)
    bad = []
    for name in _ROLE.findall(text):
        first, _, rest = name.partition(".")
        if first == "tracker" or (rest and first not in defined):
            continue
        if first not in defined or (rest and defined[first]
                                    and rest.split(".")[0] not in defined[first]):
            bad.append(name)
    return sorted(bad)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_docstring_names_what_exists(path: Path) -> None:
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and doc.strip(), f"{path.relative_to(REPO)} has no module docstring"
    bad = (missing_files(doc, path.parent) + missing_modules(doc, LITERALS)
           + missing_roles(doc, tree))
    assert not bad, f"{path.relative_to(REPO)}'s docstring names what does not exist: {bad}"



def test_architecture_map_names_files_that_exist() -> None:
    """docs/architecture.md (test_architecture.py checks its tracker paths and names; this
    also reads paths with a hyphen, such as docs/model-config.md)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    assert missing_files(text, REPO) == []


def test_the_checks_see_what_is_gone(tmp_path: Path) -> None:
    pkg = tmp_path / "tracker" / "tuning"
    pkg.mkdir(parents=True)
    (pkg / "trial.py").write_text("")
    text = ("one trial: trial.py, tuning/trial.py, tracker/tuning/trial.py, <model>/1/model.py, "
            "model.py; gone: pipeline.py, measure/multi.py, tracker/confirm_sequence.py, "
            "docs/model-config.md")
    assert missing_files(text, pkg, tmp_path) == [
        "docs/model-config.md", "measure/multi.py", "pipeline.py",
        "tracker/confirm_sequence.py"]
    assert missing_files("docs/model-config.md", REPO) == []
    text = ("tracker.tuning.tune.tune, tracker.search.optuna_study, tracker.deploy.status "
            "(a tag), tracker.search.study, tracker.candidate.entries.pick_best_joint_level")
    assert missing_modules(text, {"tracker.deploy.status"}) == [
        "tracker.candidate.entries.pick_best_joint_level", "tracker.search.study"]
    tree = ast.parse("import mlflow\nclass A:\n    def take(self): ...\ndef f(): ...\nX = 1\n")
    text = (":func:`f`, :meth:`A.take`, :data:`X`, :class:`mlflow.MlflowClient`, "
            ":func:`gone`, :meth:`A.give`, :class:`~tracker.invocation.session.Interrupted`")
    assert missing_roles(text, tree) == ["A.give", "gone"]
