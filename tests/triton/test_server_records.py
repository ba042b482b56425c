"""The records of local servers and what the next start does with them: a private state
directory, records checked before they are believed, and nothing killed or removed that is
not the recorded server's. Real processes throughout (``sleep``, and a copy of it named
``tritonserver`` where a server is needed); the state directory is the test's own."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tracker.errors import ServerError
from tracker.triton.server import processes, records
from tracker.triton.server.local import LocalTritonServer

SERVER_ID = "0123456789ab"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's state directory (``$XDG_RUNTIME_DIR/tracker-servers``), not the machine's."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime / "tracker-servers"


@pytest.fixture()
def dead_owner() -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {"owner_pid": proc.pid, "owner_start": 0.0}


@pytest.fixture()
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; whatever is left of them is killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _sleeper(spawned: list[subprocess.Popen[bytes]], binary: str = "sleep",
             env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([binary, "60"], env=env, start_new_session=True)
    spawned.append(proc)
    return proc


def _fake_tritonserver(tmp_path: Path) -> str:
    """A copy of ``sleep`` named ``tritonserver``: a process whose name is a server's."""
    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir(exist_ok=True)
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", fake)
    return str(fake)


def _record(owner: dict[str, Any], proc: subprocess.Popen[bytes], server_id: str = SERVER_ID,
            **override: Any) -> Path:
    rec = {**owner, "server_pid": proc.pid, "pgid": proc.pid,
           "server_start": psutil.Process(proc.pid).create_time(),
           "shm_prefix": records.shm_prefix(server_id), **override}
    path = records.state_dir() / f"{server_id}.json"
    path.write_text(json.dumps(rec))
    return path


# -- the state directory --------------------------------------------------------------------
def test_state_dir_is_made_private(state: Path) -> None:
    old = os.umask(0)
    try:
        assert records.state_dir() == state
    finally:
        os.umask(old)
    st = state.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_state_dir_readable_by_others_is_tightened(state: Path) -> None:
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    records.state_dir()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_state_dir_writable_by_others_is_refused(state: Path, tmp_path: Path,
                                                 mode: int) -> None:
    state.mkdir()
    state.chmod(mode)
    with pytest.raises(ServerError) as caught:
        processes.reap_leftovers()
    message = str(caught.value)
    assert str(state) in message and f"mode {mode:04o}" in message, message
    assert f"chmod 700 {state}" in message and "XDG_RUNTIME_DIR" in message, message
    assert stat.S_IMODE(state.stat().st_mode) == mode, "a refused directory is left as it is"
    # a start refuses before anything runs
    server = LocalTritonServer()
    with pytest.raises(ServerError, match="writable by others"):
        server.start(tmp_path)
    assert not server.running and not server.pids()


def test_state_dir_of_another_user_is_refused(state: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    state.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(state, 4242, -1)
        other = 4242
    else:  # not root: no directory of another user can be made, so this user "changes"
        other = os.getuid()
        monkeypatch.setattr(records.os, "getuid", lambda: other + 1)
    with pytest.raises(ServerError, match=f"belongs to uid {other}, not to this user"):
        records.state_dir()


def test_state_dir_that_is_a_link_is_refused(state: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    state.symlink_to(target)
    with pytest.raises(ServerError, match="is not a directory"):
        records.state_dir()


def test_state_dir_in_a_directory_others_may_rename_in_is_refused(state: Path) -> None:
    state.parent.chmod(0o777)
    with pytest.raises(ServerError, match="which another user may rename things in"):
        records.state_dir()
    state.parent.chmod(0o1777)  # sticky, as /tmp: only the owner renames its own entries
    assert records.state_dir() == state


def test_records_are_written_private(tmp_path: Path,
                                     spawned: list[subprocess.Popen[bytes]]) -> None:
    proc = _sleeper(spawned)
    path = records.write_record(SERVER_ID, proc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rec = records.read_record(path)
    assert (rec.server_id, rec.server_pid, rec.owner_pid) == (SERVER_ID, proc.pid, os.getpid())


# -- what the next start does with a record --------------------------------------------------
def test_a_record_naming_an_unrelated_process_leaves_it_alive(
        dead_owner: dict[str, Any], spawned: list[subprocess.Popen[bytes]],
        caplog: pytest.LogCaptureFixture) -> None:
    victim = _sleeper(spawned)  # in its own session, as a server would be
    record = _record(dead_owner, victim)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        assert processes.reap_leftovers() == []
    assert victim.poll() is None, "a process the record merely names was killed"
    assert not record.exists()
    assert f"{victim.pid} (sleep)" in caplog.text and "left them running" in caplog.text


def test_a_server_named_process_without_the_server_id_is_left_alive(
        tmp_path: Path, dead_owner: dict[str, Any],
        spawned: list[subprocess.Popen[bytes]]) -> None:
    other_id = {**os.environ, processes.SERVER_ENV: "ffffffffffff"}
    imposter = _sleeper(spawned, _fake_tritonserver(tmp_path), env=other_id)
    assert psutil.Process(imposter.pid).name() == "tritonserver"
    _record(dead_owner, imposter)
    assert processes.reap_leftovers() == []
    assert imposter.poll() is None


def test_a_confirmed_leftover_is_killed_and_strangers_in_its_group_are_not(
        tmp_path: Path, dead_owner: dict[str, Any],
        spawned: list[subprocess.Popen[bytes]]) -> None:
    ours = {**os.environ, processes.SERVER_ENV: SERVER_ID}
    # a session whose leader becomes the "server" after starting a plain sleep in its group
    server = subprocess.Popen(["sh", "-c", f"sleep 60 & exec {_fake_tritonserver(tmp_path)} 60"],
                              env=ours, start_new_session=True)
    spawned.append(server)
    stranger = _wait_for_member(server.pid, "sleep")
    shm = Path("/dev/shm") / (records.shm_prefix(SERVER_ID) + "region")
    shm.write_bytes(b"")
    try:
        _wait_for_member(server.pid, "tritonserver")
        record = _record(dead_owner, server)
        assert processes.reap_leftovers() == [server.pid]
        assert server.wait(timeout=5) == -9
        assert stranger.is_running() and stranger.status() != psutil.STATUS_ZOMBIE
        assert not record.exists() and not shm.exists()
    finally:
        shm.unlink(missing_ok=True)
        with contextlib.suppress(psutil.NoSuchProcess):
            stranger.kill()


def _wait_for_member(pgid: int, name: str, timeout_s: float = 5.0) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["name"]):
            with contextlib.suppress(psutil.Error, OSError):
                if proc.info["name"] == name and os.getpgid(proc.pid) == pgid:
                    return proc
        time.sleep(0.02)
    raise AssertionError(f"no process {name!r} in process group {pgid}")


def test_a_live_owners_record_is_left_alone(spawned: list[subprocess.Popen[bytes]],
                                            tmp_path: Path) -> None:
    ours = {**os.environ, processes.SERVER_ENV: SERVER_ID}
    server = _sleeper(spawned, _fake_tritonserver(tmp_path), env=ours)
    record = _record(records.owner_identity(), server)
    assert processes.reap_leftovers() == []
    assert server.poll() is None and record.exists()


def test_an_shm_prefix_leading_out_of_dev_shm_removes_nothing(
        tmp_path: Path, dead_owner: dict[str, Any],
        spawned: list[subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture) -> None:
    victim = tmp_path / "x_victim"
    victim.write_text("keep me")
    escape = os.path.relpath(tmp_path / "x", "/dev/shm")  # ../../tmp/.../x
    assert escape.startswith("../")
    sleeper = _sleeper(spawned)
    record = _record(dead_owner, sleeper, shm_prefix=escape)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        assert processes.reap_leftovers() == []
    assert victim.read_text() == "keep me"
    assert not record.exists() and sleeper.poll() is None
    assert "shm_prefix must be" in caplog.text
    for prefix in (escape, escape + "/", "tracker_../", "", "*"):
        processes.remove_shm(prefix)
    assert victim.exists()


def test_malformed_records_are_skipped_in_one_line_and_removed(
        tmp_path: Path, dead_owner: dict[str, Any],
        spawned: list[subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture) -> None:
    sleeper = _sleeper(spawned)
    good = {**dead_owner, "server_pid": sleeper.pid, "pgid": sleeper.pid,
            "server_start": psutil.Process(sleeper.pid).create_time(),
            "shm_prefix": records.shm_prefix(SERVER_ID)}
    root = records.state_dir()
    bad = {
        "000000000001": "{not json",
        "000000000002": "[1, 2, 3]",
        "000000000003": json.dumps({**good, "server_pid": str(sleeper.pid)}),
        "000000000004": json.dumps({**good, "pgid": True}),
        "000000000005": json.dumps({**good, "pgid": 1}),
        "000000000006": json.dumps({**good, "owner_start": None}),
        "000000000007": json.dumps({**good, "server_pid": 1, "pgid": 1}),
        "not-a-server-id": json.dumps(good),
        "000000000008": json.dumps({k: v for k, v in good.items() if k != "server_pid"}),
    }
    for name, text in bad.items():
        (root / f"{name}.json").write_text(text)
    (root / "000000000009.json").symlink_to(root / "000000000003.json")
    valid = _record(dead_owner, sleeper, server_id="00000000000a",
                    shm_prefix=records.shm_prefix("00000000000a"))
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        assert processes.reap_leftovers() == []
    assert not list(root.iterdir()), "every record, malformed or not, is gone"
    assert not valid.exists() and sleeper.poll() is None
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("removed the malformed server record")]
    assert len(lines) == len(bad) + 1 and all("\n" not in line for line in lines), lines
