"""Names that explain themselves: no package is named after a layer rather than what it
holds; a module file name is used once unless the two files are one concept in parallel places
(:data:`PARALLEL`); no module imports another module's private (``_underscore``) name; only the
spec and ``triton/configuration.py`` ask whether a configuration is one model (``.single``):
every other module treats one model as the one-entry configuration; no class name is defined in
two modules (a reader who meets ``Verdict`` knows which one). Each checker is shown to fail on
a planted case."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tracker"

#: file names used twice, each pair one concept in two places (at most two files each)
PARALLEL: dict[str, str] = {
    "base.py": "a family's base class: the launch modes' (triton/server), the formats'",
    "capacity.py": "capacity: its spec section (spec/) and the rate search (search/)",
    "command.py": "a package's command: tracker confirm, tracker profile",
    "priorities.py": "request priorities: their load (measure/) and their load kind",
    "sequence.py": "sequences: the spec's section and Triton's sequence batcher (triton/)",
    "streaming.py": "streaming: the spec's section and its load kind",
    "trace.py": "a traffic trace: the spec's section and its load kind",
    "transport.py": "gRPC or HTTP: the load's requests (measure/), a deployment's (deploy/)",
}
#: names that say where a package sits, not what it holds
LAYER_WORDS = ("session", "workflow", "common", "core", "util", "utils", "helpers", "misc",
               "lib", "shared", "services", "layer", "base", "stuff")


def shared_names(root: Path = PKG, parallel: dict[str, str] = PARALLEL) -> dict[str, int]:
    """File name -> how many modules carry it, for names used twice and not listed in
    ``parallel``, or used more than twice."""
    counts = Counter(p.name for p in root.rglob("*.py") if p.name != "__init__.py")
    return {name: n for name, n in sorted(counts.items())
            if n > 2 or (n == 2 and name not in parallel)}


def layer_named(root: Path = PKG) -> list[str]:
    """The packages named after a layer (:data:`LAYER_WORDS`)."""
    return sorted(p.parent.relative_to(root).as_posix() for p in root.rglob("__init__.py")
                  if p.parent != root and p.parent.name in LAYER_WORDS)


def private_imports(root: Path = PKG) -> list[str]:
    """``module: name`` for every ``from tracker.x import _name`` in the package (a name
    imported across modules is part of their contract, so it is public)."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module \
                    and node.module.split(".")[0] == root.name:
                out += [f"{path.relative_to(root).as_posix()}: {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_")]
    return out


def count_askers(root: Path = PKG) -> list[str]:
    """``module:line`` for every read of an attribute ``single`` outside ``spec/`` and
    ``triton/configuration.py``."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("spec/") or rel == "triton/configuration.py":
            continue
        out += [f"{rel}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Attribute) and node.attr == "single"]
    return out


def shared_classes(root: Path = PKG) -> dict[str, list[str]]:
    """Class name -> the modules that define it, for names defined in more than one."""
    where: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(path.relative_to(root).as_posix())
    return {name: mods for name, mods in sorted(where.items()) if len(mods) > 1}


def test_no_class_name_is_defined_in_two_modules() -> None:
    assert shared_classes() == {}


def test_only_the_spec_and_the_configuration_ask_whether_it_is_one_model() -> None:
    assert count_askers() == []


def test_a_module_name_is_used_once_or_by_two_parallel_files() -> None:
    assert shared_names() == {}
    assert set(PARALLEL) <= {p.name for p in PKG.rglob("*.py")}, "a PARALLEL name is gone"


def test_no_package_is_named_after_a_layer() -> None:
    assert layer_named() == []


def test_no_private_name_is_imported_across_modules() -> None:
    assert private_imports() == []


def test_the_checkers_see_a_planted_case(tmp_path: Path) -> None:
    pkg = tmp_path / "tracker"
    for sub in ("a", "b", "c"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "stats.py").write_text("")
    (pkg / "a" / "user.py").write_text("from tracker.b.stats import _secret, public\n")
    assert shared_names(pkg) == {"stats.py": 3}
    (pkg / "c" / "stats.py").unlink()
    assert shared_names(pkg) == {"stats.py": 2}
    assert shared_names(pkg, {"stats.py": "planted"}) == {}
    (pkg / "session").mkdir()
    (pkg / "session" / "__init__.py").write_text("")
    assert layer_named(pkg) == ["session"]
    assert private_imports(pkg) == ["a/user.py: tracker.b.stats._secret"]
    (pkg / "spec").mkdir()
    (pkg / "spec" / "ok.py").write_text("x = conf.single\n")
    (pkg / "a" / "asks.py").write_text("if conf.single:\n    pass\n")
    assert count_askers(pkg) == ["a/asks.py:1"]
    (pkg / "a" / "one.py").write_text("class Verdict:\n    pass\n")
    (pkg / "b" / "two.py").write_text("class Verdict:\n    pass\n")
    assert shared_classes(pkg) == {"Verdict": ["a/one.py", "b/two.py"]}
