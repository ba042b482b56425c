"""The MLproject run the way MLflow users run a project (issue 26): `mlflow run` on a clone of
the repository, from another folder, with `--version` as for a repository URI. Each study
leaves one parent run with its child runs in the experiment its spec names, whether or not
`mlflow run` was given `--experiment-name`; real MLflow (sqlite), real Triton, no mocks.

Timings on a 2-core machine shared with other work (load 5): quickstart ~45 s, profile ~20 s,
the default spec (DenseNet-121: 2 trials, then its confirmation rounds) ~2 min, the uv
environment ~30 s with uv's cache warm (its first build fetches ~120 packages from PyPI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mlflow_project import (
    children_of,
    mlflow_run,
    own_spec,
    runs_in,
    snapshot,
    study_parents,
)
from tracker import tags

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return snapshot(tmp_path_factory.mktemp("repo"))


@pytest.fixture()
def elsewhere(tmp_path: Path) -> Path:
    """The user's folder: nothing of the project in it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def _ok(proc: object) -> None:
    rc, out, err = (getattr(proc, k) for k in ("returncode", "stdout", "stderr"))
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "Traceback" not in out + err


def _one_study(folder: Path, experiment: str, n_trials: int) -> None:
    """One FINISHED parent run in ``experiment`` with a FINISHED child per trial and the
    ``-P`` params that were given; ``mlflow run``'s own run either is it or points at it."""
    found = runs_in(folder, experiment)
    parents = study_parents(found)
    assert len(parents) == 1, [r.data.tags for r in found]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    kids = children_of(found, parent)
    assert len(kids) >= n_trials and {k.info.status for k in kids} == {"FINISHED"}
    assert parent.data.params["n_trials"] == str(n_trials)
    assert parent.data.params["study.n_trials"] == str(n_trials)
    assert "mlflow.source.git.commit" in parent.data.tags  # what ran: the clone's commit
    assert {r.info.run_id for r in found} == {parent.info.run_id} | {
        k.info.run_id for k in kids}


@pytest.mark.slow
def test_main_default_spec_from_another_folder_lands_in_its_experiment(
        clone: Path, elsewhere: Path) -> None:
    """The issue's command: the default spec (projects/densenet_onnx/study.yaml, relative to
    the project) and no --experiment-name. MLflow makes its run in Default before the entry
    point starts: the study goes to densenet_onnx, MLflow's run points at it, a line says so."""
    proc = mlflow_run([str(clone), "--version", "main", "--env-manager", "local",
                       "-P", "n_trials=2"], elsewhere, timeout_s=480)
    _ok(proc)
    _one_study(elsewhere, "densenet_onnx", 2)
    (parent,) = study_parents(runs_in(elsewhere, "densenet_onnx"))
    assert parent.data.params["spec"] == "projects/densenet_onnx/study.yaml"
    assert parent.data.params["study.spec"] == str(clone / "projects/densenet_onnx/study.yaml")
    (launcher,) = runs_in(elsewhere, "Default")
    assert launcher.data.tags[tags.ROLE] == "launcher"
    assert launcher.data.tags[tags.STUDY_RUN_ID] == parent.info.run_id
    assert parent.data.tags[tags.LAUNCHER] == launcher.info.run_id
    assert "--experiment-name densenet_onnx" in launcher.data.tags[tags.NOTE]
    assert "in the spec's experiment 'densenet_onnx'" in proc.stderr
    # the study's files are here, beside Default's, not in the clone MLflow ran the command in
    assert (elsewhere / "optuna.db").is_file() and not (clone / "mlruns").exists()
    assert (Path(parent.info.artifact_uri.removeprefix("file://")) / "best/config.pbtxt"
            ).is_file()
    assert Path(parent.info.artifact_uri.removeprefix("file://")).is_relative_to(elsewhere)


def test_main_project_spec_from_a_repository_uri(clone: Path, elsewhere: Path) -> None:
    """`-P spec=projects/quickstart/study.yaml` (in the project, not here) on the file:// URI
    with --experiment-name: MLflow's own run is the study's parent, no other run."""
    proc = mlflow_run([clone.as_uri(), "--version", "main", "--env-manager", "local",
                       "--experiment-name", "quickstart",
                       "-P", "spec=projects/quickstart/study.yaml", "-P", "n_trials=2"],
                      elsewhere, timeout_s=300)
    _ok(proc)
    _one_study(elsewhere, "quickstart", 2)
    assert runs_in(elsewhere, "Default") == []
    assert "note:" not in proc.stderr


def test_profile_from_another_folder(clone: Path, elsewhere: Path) -> None:
    """The profile entry point, its default spec from the project, no --version (the clone's
    working tree as it is): one run in the spec's experiment with the sweep and config."""
    proc = mlflow_run([str(clone), "-e", "profile", "--env-manager", "local",
                       "-P", "set=instance_group.count=2", "-P", "concurrency=4"], elsewhere,
                      timeout_s=300)
    _ok(proc)
    found = runs_in(elsewhere, "quickstart")
    (run,) = [r for r in found if r.data.tags.get(tags.ROLE) == "profile"]
    assert run.info.status == "FINISHED" and len(found) == 1
    assert run.data.params["instance_group.count"] == "2"
    assert run.data.params["set"] == "instance_group.count=2"
    assert run.data.params["concurrency"] == "4"  # passed on as --concurrency 4: one level
    assert "perf_throughput" in run.data.metrics
    (launcher,) = runs_in(elsewhere, "Default")
    assert launcher.data.tags[tags.STUDY_RUN_ID] == run.info.run_id


def test_a_spec_found_nowhere_is_one_line_naming_where_it_looked(
        clone: Path, elsewhere: Path) -> None:
    proc = mlflow_run([str(clone), "-e", "profile", "--env-manager", "local",
                       "-P", "spec=nope/study.yaml"], elsewhere, timeout_s=120)
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert ours == [f"error: spec file not found: nope/study.yaml; looked in {clone} (the "
                    f"project folder `mlflow run` runs in) and in {elsewhere} (the folder "
                    "`mlflow run` was started in)"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_uv_environment_with_the_users_own_spec(clone: Path, elsewhere: Path) -> None:
    """--env-manager uv: MLflow builds the project's environment from python_env.yaml with uv
    (needs only `pip install mlflow uv`) and runs the entry point in it; the spec is the
    user's own, relative to the folder `mlflow run` was started in."""
    spec = own_spec(elsewhere)
    envs = elsewhere.parent / "envs"  # built here, not found in ~/.mlflow/envs from before
    proc = mlflow_run([str(clone), "-e", "profile", "--env-manager", "uv",
                       "--experiment-name", "own", "-P", f"spec={spec}"], elsewhere,
                      timeout_s=540, env={"MLFLOW_ENV_ROOT": str(envs)})
    _ok(proc)
    assert "Installed" in proc.stderr and len(list(envs.iterdir())) == 1
    (run,) = runs_in(elsewhere, "own")
    assert run.info.status == "FINISHED" and "perf_throughput" in run.data.metrics
    assert run.data.tags[tags.ROLE] == "profile"
    assert (elsewhere / "own" / "model.onnx").is_file()  # built beside the user's spec
