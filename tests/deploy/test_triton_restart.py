"""The serving Triton killed under a running `tracker watch` and started again on the same
repository and ports, as a pod is rescheduled: SIGKILL to its whole process group, then the
same command line (explicit model control mode, which loads nothing at start). Real Triton (one
per test), real sqlite registry, the watcher polling in a thread.

While Triton is down the watcher reports it on its poll line and goes on polling; once Triton
answers, what the deployments' records name is loaded again. A deployment in flight when
Triton died is rolled back by its journal (before the commit point: the journal is kept until
Triton answers) or finished (past it: the files and the registry are done, and the version
serves once Triton is back). Afterwards the invariant of docs/reliability.md holds: exactly one
version serves, and the registry's stage, alias and serving tag name it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import pytest

from tests.deploy.test_faults import STAGE_API_WARNING, assert_invariant
from tests.support import models
from tests.support.deploy import V1, V2, _point_at, trial_model_dir
from tracker.deploy import journal, switch
from tracker.deploy.settings import resolve_settings
from tracker.deploy.watch import NAME_TAG, Watcher
from tracker.spec import ServerSection
from tracker.tracking import flavor, registry
from tracker.triton.server import processes
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.server.ports import free_ports

pytestmark = [pytest.mark.triton, pytest.mark.filterwarnings(STAGE_API_WARNING)]


class Pod:
    """A Triton on fixed ports over one repository, killed and started again as a pod is."""

    def __init__(self, repo: Path) -> None:
        http, grpc, metrics = free_ports(3)
        self.repo = repo
        self.server = LocalTritonServer(ServerSection(
            http_port=http, grpc_port=grpc, metrics_port=metrics, startup_timeout_s=60))

    def kill(self) -> None:
        """SIGKILL to the server's process group (its Python backend stubs too)."""
        processes.kill_group(self.server.pids()[0])

    def start_again(self) -> None:
        self.server.stop()  # what the kill left: shared memory, the record
        self.server.start(self.repo, explicit=True)


@pytest.fixture()
def pod(tmp_path: Path) -> Iterator[Pod]:
    """A Triton of the test's own: the one it leaves is not the one it started (conftest's
    guard stops a tritonserver that a test leaves running)."""
    (tmp_path / "serving-repo").mkdir()
    found = Pod(tmp_path / "serving-repo")
    with found.server:
        found.server.start(found.repo, explicit=True)
        yield found


class Watching:
    """A watcher of one registered model polling every 0.2 s in a thread; its lines kept."""

    def __init__(self, registered: str) -> None:
        self.lines: list[str] = []
        self.stop = threading.Event()
        watcher = Watcher(resolve_settings(), models=[registered], log=self.lines.append)
        self.thread = threading.Thread(target=watcher.run, args=(0.2,),
                                       kwargs={"stop": self.stop}, daemon=True)

    def wait_for(self, *texts: str, after: int = 0, timeout_s: float = 90) -> int:
        """The index of the first line from ``after`` on that holds every one of ``texts``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.thread.is_alive(), "the watcher stopped:\n" + "\n".join(self.lines)
            for i, line in enumerate(self.lines[after:], after):
                if all(t in line for t in texts):
                    return i
            time.sleep(0.05)
        pytest.fail(f"no watcher line with {texts} in {timeout_s:g} s:\n" + "\n".join(self.lines))


@pytest.fixture()
def watching(pod: Pod, mlflow_uri: str,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Watching]]:
    _point_at(monkeypatch, pod.server, pod.repo)
    started: list[Watching] = []

    def start(registered: str) -> Watching:
        found = Watching(registered)
        found.thread.start()
        started.append(found)
        return found

    yield start
    for found in started:
        found.stop.set()
        found.thread.join(timeout=60)
        assert not found.thread.is_alive(), "the watcher did not stop"


def _register(tmp: Path, reg: str, name: str, values: dict[str, Any]) -> str:
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("restart")
    run = client.create_run(exp.experiment_id if exp else
                            client.create_experiment("restart")).info.run_id
    n = len(list(tmp.glob("trial*")))
    onnx = models.dynamic_batch(tmp / "tiny.onnx")
    logged = flavor.log_triton_model(trial_model_dir(tmp / f"trial{n}", onnx, values), run)
    mv = registry.register_version(client, reg, registry.VersionRequest(
        source=logged.model_uri, run_id=run, model_id=logged.model_id))
    client.set_registered_model_tag(reg, NAME_TAG, name)
    return str(mv.version)


def _alias(reg: str, version: str) -> None:
    mlflow.MlflowClient().set_registered_model_alias(reg, "production", version)


def test_the_watcher_reloads_what_serves_after_triton_restarts(
        tmp_path: Path, pod: Pod, watching: Callable[[str], Watching]) -> None:
    reg, name = "restart-idle", "r-idle"
    v1 = _register(tmp_path, reg, name, V1)
    watch = watching(reg)
    _alias(reg, v1)
    at = watch.wait_for(f"{reg} v{v1} (alias): ok")
    pod.kill()
    at = watch.wait_for("poll failed (retrying every 0.2 s): cannot reach Triton at", after=at)
    time.sleep(0.5)  # a few polls more against the dead server
    assert sum("poll failed" in line for line in watch.lines) == 1, watch.lines  # said once
    pod.start_again()
    at = watch.wait_for(f"{name}: Triton had not loaded it since it started; loaded again: "
                        f"version {v1} serves", after=at)
    at = watch.wait_for("the poll works again", after=at)
    watch.wait_for(f"{reg}: Triton {name!r} serves v{v1}", "(agree)", after=at)
    assert_invariant(pod.server, pod.repo, reg, name, int(v1))


#: the step Triton dies at: (the switch's function, the version that serves afterwards)
IN_FLIGHT = {"drop-old": ("_drop_old", "v1"), "finish": ("finish", "v2")}


@pytest.mark.parametrize("step", list(IN_FLIGHT))
def test_a_deployment_in_flight_when_triton_dies_is_completed_once_it_answers(
        step: str, tmp_path: Path, pod: Pod, watching: Callable[[str], Watching],
        monkeypatch: pytest.MonkeyPatch) -> None:
    reg, name = f"restart-{step}", f"r-{step}"
    versions = {"v1": _register(tmp_path, reg, name, V1), "v2": _register(tmp_path, reg, name, V2)}
    watch = watching(reg)
    _alias(reg, versions["v1"])
    at = watch.wait_for(f"{reg} v{versions['v1']} (alias): ok")
    attr, serves = IN_FLIGHT[step]
    real = getattr(switch, attr)
    fired: list[bool] = []

    def dies_first(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(True)
            pod.kill()
        return real(*args, **kwargs)

    monkeypatch.setattr(switch, attr, dies_first)
    _alias(reg, versions["v2"])
    if step == "drop-old":  # before the commit point: rolled back on disk, the journal kept
        at = watch.wait_for(f"{reg} v{versions['v2']} (alias): FAILED", "Triton does not answer",
                            f"back to version {versions['v1']} when it answers again", after=at)
        assert journal.left_behind(pod.repo)
        at = watch.wait_for("poll failed", "cannot reach Triton at", "the interrupted "
                            f"deployment of version {versions['v2']} of {name!r} is rolled "
                            "back when it answers", after=at)
        time.sleep(0.5)  # a few polls more against the dead server: said once
        assert sum("poll failed" in line for line in watch.lines) == 1, watch.lines
        assert sum("restoring the previous config" in line for line in watch.lines) == 1
        done = f"{name}: an interrupted deployment of version {versions['v2']} was rolled " \
               f"back; version {versions['v1']} serves"
    else:  # past it: the files and the registry are done; Triton loads it when back
        at = watch.wait_for(f"{reg} v{versions['v2']} (alias): ok", after=at)
        at = watch.wait_for("poll failed", "cannot reach Triton at", after=at)
        done = f"{name}: Triton had not loaded it since it started; loaded again: version " \
               f"{versions['v2']} serves"
    assert fired
    pod.start_again()
    at = watch.wait_for(done, after=at)
    watch.wait_for(f"{reg}: Triton {name!r} serves {serves}", "(agree)", after=at)
    assert_invariant(pod.server, pod.repo, reg, name, int(versions[serves]))
