"""LocalTritonServer beyond the shared contract: ports, start failures, the reload strategy,
and no orphans after SIGKILL / SIGINT / SIGTERM of the process that owns the server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tracker.errors import ServerStartError
from tracker.spec import ServerSection
from tracker.triton.server import processes, records
from tracker.triton.server.local import LocalTritonServer, wheel_server

pytestmark = pytest.mark.triton

MODEL_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils

    # the stubs' numpy glue is built for numpy 1 (see tracker/triton/shim/model.py)
    GLUE = int(np.__version__.split(".")[0]) < 2

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                y = np.ascontiguousarray(x + 1)
                t = pb_utils.Tensor("Y", y) if GLUE else pb_utils.Tensor.from_dlpack("Y", y)
                out.append(pb_utils.InferenceResponse([t]))
            return out
""")
CONFIG = """name: "add"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_CPU count: %d }]
"""


def add_repo(root: Path, count: int = 1) -> Path:
    (root / "add" / "1").mkdir(parents=True, exist_ok=True)
    (root / "add" / "1" / "model.py").write_text(MODEL_PY)
    (root / "add" / "config.pbtxt").write_text(CONFIG % count)
    return root


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def test_wheel_server_is_prepared_for_this_python() -> None:
    wheel = wheel_server()
    stub = wheel.backend_dir / "python" / "triton_python_backend_stub"
    assert os.access(stub.resolve(), os.X_OK)
    assert (wheel.backend_dir / "python" / "libtriton_python.so").exists()
    assert LocalTritonServer().has_backend("python")
    assert not LocalTritonServer().has_backend("onnxruntime")


def test_stop_kills_the_whole_group_and_shared_memory(tmp_path: Path) -> None:
    server = LocalTritonServer(ServerSection(gpus=[3]))
    envs = processes.python_envs()
    with server:
        server.start(add_repo(tmp_path, count=2))
        made = processes.python_envs() - envs
        assert made, "the Python backend makes a /tmp/python_env_* folder per start"
        pids = server.pids()
        assert len(pids) == 3, "tritonserver + one Python stub per instance"
        assert {os.getpgid(p) for p in pids} == {pids[0]}, "one process group"
        env = psutil.Process(pids[0]).environ()
        assert env["CUDA_VISIBLE_DEVICES"] == "3"
        assert env[processes.OWNER_ENV] == str(os.getpid())
        prefix = server._shm_prefix
        assert list(Path("/dev/shm").glob(prefix + "*")), "the stubs use named shm regions"
        for conn in psutil.Process(pids[0]).net_connections("tcp"):
            if conn.status == psutil.CONN_LISTEN:
                assert conn.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1"), conn
    assert not _alive(pids)
    assert not list(Path("/dev/shm").glob(prefix + "*"))
    assert not [p for p in made if p.exists()], "the backend's /tmp folder outlived the stop"
    assert "Started GRPCInferenceService" in server.log_text()  # the log outlives the server


@pytest.mark.skipif(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1,
                    reason="needs no other Python-backend server on the machine: the folders "
                           "name no server, and the other pytest worker starts such servers "
                           "all the time; scripts/plain-install.sh runs this file serially")
def test_a_stop_removes_only_the_backend_folders_its_own_server_made(tmp_path: Path) -> None:
    """Two servers on one machine: the first one's stop leaves the folder the second made
    (in explicit mode, at its first Python model's load); the second's stop removes it. The
    folders name no server, so another process's Python-backend server that makes or removes
    one meanwhile leaves nothing to conclude: the case is run again, up to 3 times."""
    for attempt in range(3):
        if _two_servers(tmp_path / str(attempt)):
            return
    pytest.fail("in 3 tries, other processes' servers made or removed /tmp/python_env_* "
                "folders while this case ran")


def _two_servers(root: Path) -> bool:
    """The case once; False when a folder of another process came or went meanwhile."""
    first, second = LocalTritonServer(), LocalTritonServer()
    with first, second:
        start = processes.python_envs()
        first.start(add_repo(root / "a"))
        (root / "b").mkdir()
        second.start(root / "b", explicit=True)
        add_repo(root / "b")
        before = processes.python_envs()
        second.load("add")
        made = processes.python_envs() - before
        if len(made) > 1 or len(before - start) > 1 or start - before:
            return False
        assert len(made) == 1, "the backend makes its folder at the first Python model"
        first.stop()
        now = processes.python_envs()
        if start - now or now - start - made - (before - start):
            return False
        assert all(p.exists() for p in made), "another server's stop took this one's folder"
        assert not (before - start) & now, "the first server's stop left its own folder"
        second.stop()
        assert not [p for p in made if p.exists()], "its own stop leaves the folder behind"
    return True


def test_a_tritonserver_found_on_path_runs_as_it_is(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """server.binary may name a command on PATH (the spec resolves a bare name against its
    folder; the launcher then looks the name up on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonserver").symlink_to(wheel_server().binary)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "empty").mkdir()
    with LocalTritonServer(ServerSection(binary=tmp_path / "spec-dir" / "tritonserver")) as server:
        server.start(tmp_path / "empty")
        assert psutil.Process(server.pids()[0]).exe() == str(wheel_server().binary)
        with server.client() as client:
            assert client.is_ready()
    with pytest.raises(ServerStartError, match="not an executable file nor a command"):
        LocalTritonServer(ServerSection(binary=tmp_path / "no-such-server")).start(
            tmp_path / "empty")


def test_fixed_port_that_is_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = LocalTritonServer(ServerSection(grpc_port=port))
        with pytest.raises(ServerStartError, match=f"server.grpc_port {port} is taken"):
            server.start(add_repo(tmp_path))
    assert not server.running


def test_repository_path_with_spaces_is_refused_up_front(tmp_path: Path) -> None:
    """Triton's Python backend splits its stub's command line on spaces: the stub aborts and
    the server would hang until the startup timeout."""
    server = LocalTritonServer()
    with pytest.raises(ServerStartError, match="without spaces"):
        server.start(add_repo(tmp_path / "my models"))
    assert not server.running


def test_start_failure_says_why_with_the_log_tail(tmp_path: Path) -> None:
    server = LocalTritonServer(extra_args=("--no-such-flag",))
    with pytest.raises(ServerStartError) as caught:
        server.start(add_repo(tmp_path))
    err = caught.value
    assert "tritonserver exited with status" in err.reason
    assert "unrecognized option '--no-such-flag'" in err.reason
    assert err.log_tail.strip(), "the tail of the server log comes with the error"
    assert not server.running and not server.pids()


# ---- the owner dies -------------------------------------------------------------------------

OWNER = textwrap.dedent("""
    import faulthandler, json, signal, sys, time
    from pathlib import Path
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks
    # a job started in the background (nohup, `&` in a script) inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler: the SIGINT case hung in CI so
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tracker.triton.server.local import LocalTritonServer
    if sys.argv[2] == "term":  # what the CLI does: SIGTERM unwinds like Ctrl-C
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    server = LocalTritonServer()
    with server:
        server.start(Path(sys.argv[1]))
        print(json.dumps({"pids": server.pids(), "prefix": server._shm_prefix}), flush=True)
        while True:
            time.sleep(0.1)
""")


def _owner(repo: Path, how: str) -> tuple[subprocess.Popen[str], list[int], str]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(repo), how],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate()
        pytest.fail(f"the owner process failed (status {proc.returncode}): {err[-2000:]}")
    info = json.loads(line)
    return proc, info["pids"], info["prefix"]


def _exits_or_shows_where_it_hangs(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Wait for the owner to exit; if it hangs, fail with every thread's stack (faulthandler
    on SIGUSR1), then kill it so that no process is left."""
    try:
        proc.communicate(timeout=timeout_s)
        return
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        proc.kill()
        _, err = proc.communicate()
    pytest.fail(f"the owner did not exit within {timeout_s} s; its threads:\n{err[-6000:]}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_leave_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    proc, pids, prefix = _owner(add_repo(tmp_path), "term")
    proc.send_signal(sig)
    _exits_or_shows_where_it_hangs(proc, 30)
    assert not _alive(pids), "server or stub survived its owner's clean exit"
    assert not list(Path("/dev/shm").glob(prefix + "*"))
    assert not [p for p in records.state_dir().glob("*.json")
                if json.loads(p.read_text())["owner_pid"] == proc.pid]


def test_sigkill_of_the_owner_leaves_nothing_the_next_start_does_not_clean(
        tmp_path: Path) -> None:
    proc, pids, prefix = _owner(add_repo(tmp_path), "plain")
    proc.kill()
    proc.communicate()
    # PDEATHSIG kills tritonserver at once; its stubs notice and exit on their own
    assert not _wait_gone(pids[:1], 5), "tritonserver outlived its owner's SIGKILL"
    # shm regions and the record may be left; the next start reaps them first (another
    # session's server start on this machine may have done so already)
    processes.reap_leftovers()
    assert not _wait_gone(pids, 10), "a stub outlived its server and the reaper"
    assert not list(Path("/dev/shm").glob(prefix + "*"))
    assert not [p for p in records.state_dir().glob("*.json")
                if json.loads(p.read_text())["owner_pid"] == proc.pid]


def test_reaper_kills_what_a_dead_owner_left(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Belt and braces for when PDEATHSIG could not act (e.g. the server was started by a
    thread of a process that lives on): a record whose owner is dead gets its server killed
    and its shared memory removed, once the process is confirmed as that server (its name
    and TRACKER_SERVER_ID); a process the record merely names is left running, and a live
    owner's server is left alone."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # this test's records only
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    fake = tmp_path / "bin" / "tritonserver"  # `sleep` by a server's name
    fake.parent.mkdir()
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", fake)
    leftover = subprocess.Popen([str(fake), "60"], start_new_session=True,
                                env={**os.environ, processes.SERVER_ENV: "0000000000aa"})
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    shm = Path("/dev/shm") / "tracker_0000000000aa_x"
    shm.write_bytes(b"")
    planted: list[Path] = []
    for server_id, proc in (("0000000000aa", leftover), ("0000000000bb", stranger)):
        planted.append(records.state_dir() / f"{server_id}.json")
        planted[-1].write_text(json.dumps({
            "owner_pid": dead.pid, "owner_start": 0.0, "server_pid": proc.pid,
            "pgid": proc.pid, "server_start": psutil.Process(proc.pid).create_time(),
            "shm_prefix": records.shm_prefix(server_id)}))
    mine = LocalTritonServer()
    try:
        with mine:
            mine.start(add_repo(tmp_path / "repo"))  # a start reaps first
            assert leftover.wait(timeout=5) == -signal.SIGKILL
            assert stranger.poll() is None, "a process that is no server of ours was killed"
            assert not shm.exists() and not any(r.exists() for r in planted)
            assert processes.reap_leftovers() == []  # our own live server is not a leftover
            assert mine.pids()
    finally:
        shm.unlink(missing_ok=True)
        for proc in (leftover, stranger):
            proc.kill()
            proc.wait()
