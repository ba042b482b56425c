"""The install: requirements.lock (what scripts/env.sh installs) still satisfies pyproject.toml,
and the CLI says which versions it runs with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"requirements.lock: {line!r} is not NAME==VERSION"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _requirements(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    if extra:
        texts += project["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


@pytest.mark.parametrize("extra", [None, "dev", "docs"])
def test_lock_satisfies_pyproject(extra: str | None) -> None:
    """Every requirement that applies on this platform is pinned, at a version in its range
    (a range changed in pyproject.toml without `bash scripts/lock.sh` fails here)."""
    pins = _lock()
    env = {**default_environment(), "extra": extra or ""}
    problems = []
    for req in _requirements(extra):
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req.name} is not in requirements.lock")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name}=={pinned} does not satisfy {req}")
    assert not problems, "run `bash scripts/lock.sh`: " + "; ".join(problems)


def test_lock_pins_one_version_of_each_package() -> None:
    names = [line.split("==")[0].lower() for line in (ROOT / "requirements.lock").read_text()
             .splitlines() if line.strip() and not line.startswith("#")]
    assert len(names) == len(set(names))
    assert "nvidia-pytriton" in names or sys.platform != "linux"


def test_version_names_the_packages_that_decide_measurement() -> None:
    out = subprocess.run([sys.executable, "-m", "tracker.cli", "--version"], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    from importlib.metadata import version

    assert out.startswith(f"tracker {version('triton-tracker')} (")
    for name in ("nvidia-pytriton", "numpy", "onnxruntime", "mlflow", "optuna"):
        assert f"{name} {version(name)}" in out, out


def test_help_hides_the_empty_choice() -> None:
    """MLproject passes empty strings for unset parameters; help shows only real choices."""
    out = subprocess.run([sys.executable, "-m", "tracker.cli", "tune", "-h"], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    assert "[tpe|random|grid|nsga2]" in out and "[|" not in out
    bad = subprocess.run([sys.executable, "-m", "tracker.cli", "tune", "x.yaml", "--sampler",
                          "bogus"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2
    assert "'bogus' is not one of 'tpe', 'random', 'grid', 'nsga2'" in bad.stderr
