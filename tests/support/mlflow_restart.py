"""A real `mlflow server` that a test stops and starts again on the same port and store, as a
pod restart does (sqlite backend, artifacts served by the server itself from a local folder:
``--serve-artifacts --artifacts-destination``, so runs get ``mlflow-artifacts:`` URIs and
every artifact goes through the server)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.postgres import ServiceUnavailable, free_port, group_pids, still_running


class RestartableMlflow:
    """``start()`` / ``stop()`` any number of times; ``close()`` stops it and removes its
    folder. ``pids`` collects every process it started (to check none is left)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tracker-mlflow-restart-"))
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: set[int] = set()

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "server.log").read_text(errors="replace")[-chars:]
        return ""

    def start(self, timeout_s: float = 120) -> None:
        bindir = Path(sys.executable).parent
        cmd = [str(bindir / "mlflow"), "server", "--host", "127.0.0.1", "--port",
               str(self.port), "--workers", "1", "--backend-store-uri",
               f"sqlite:///{self.root / 'mlflow.db'}", "--serve-artifacts",
               "--artifacts-destination", str(self.root / "artifacts")]
        env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
               "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.root, env=env, start_new_session=True)
        self.pids.add(self.proc.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.pids.update(group_pids(self.proc.pid))
            if self.proc.poll() is not None:
                raise ServiceUnavailable(f"mlflow server exited with {self.proc.returncode}:"
                                         f"\n{self.log_tail()}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(self.uri + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.3)
        self.stop()
        raise ServiceUnavailable(f"mlflow server not healthy after {timeout_s:.0f}s:\n"
                                 f"{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server's whole process group; the port refuses connections after."""
        if self.proc is None:
            return
        self.pids.update(group_pids(self.proc.pid))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # uvicorn workers left in the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> list[int]:
        """Stop it and remove its folder; the pids of its processes still alive."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        return still_running(sorted(self.pids))
