"""Real services for the scale-out tests: a private PostgreSQL instance (Debian's package) and an
`mlflow server` process, both on 127.0.0.1 and free ports, both torn down at the end.

PostgreSQL runs from a fresh `initdb` in a temporary folder, never the system cluster. `initdb`
refuses to run as root, so as root the folder is given to the `postgres` OS user and the
binaries run under `runuser -u postgres`. Administration goes over the instance's own Unix
socket (trust auth); the test user connects over TCP with a password (scram-sha-256), so
password redaction is exercised with a real secret.

Nothing here is a fixture: tests/conftest.py wraps these in session fixtures, and a forgotten
instance is still stopped at interpreter exit (atexit), so no database or server outlives the run.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

PG_USER = "tracker"


class ServiceUnavailable(RuntimeError):
    """The service cannot be installed or started here; tests needing it are skipped."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    raise ServiceUnavailable(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl); "
        "run `sudo bash scripts/system-deps.sh` to install Debian's postgresql package")


@dataclass
class PostgresInstance:
    """A running private PostgreSQL server. ``url(db)`` is a password URL for the test user."""

    root: Path
    port: int
    password: str
    bindir: Path
    as_postgres: bool
    databases: list[str] = field(default_factory=list)
    stopped: bool = False

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{PG_USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def admin_sql(self, sql: str, database: str = "postgres") -> None:
        """Run one statement as the superuser over the instance's Unix socket."""
        import psycopg2

        conn = psycopg2.connect(host=str(self.socket_dir), port=self.port, user="postgres",
                                dbname=database)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self) -> str:
        name = "t_" + secrets.token_hex(6)
        self.admin_sql(f'CREATE DATABASE "{name}" OWNER {PG_USER}')
        self.databases.append(name)
        return name

    def backend_pids(self) -> list[int]:
        """Process ids of every process of this instance (postmaster and its children)."""
        import psutil

        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            parent = psutil.Process(pid)
            return [pid, *(c.pid for c in parent.children(recursive=True))]
        except (OSError, ValueError, IndexError, psutil.Error):
            return []

    @property
    def options(self) -> str:
        """The server's options: this port and socket, durability off (a test database)."""
        return (f"-p {self.port} -k {self.socket_dir} -h 127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")

    def start(self) -> None:
        _run(self._cmd("pg_ctl", "-D", str(self.data_dir), "-o", self.options, "-l",
                       str(self.root / "server.log"), "-w", "-t", "60", "start"), timeout=90)

    def restart(self, down_s: float) -> None:
        """``pg_ctl stop -m fast`` (every session ended), ``down_s`` seconds without a
        server, then start again on the same port and data: a database restart or failover."""
        _run(self._cmd("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop"),
             timeout=60)
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if (self.data_dir / "postmaster.pid").exists():
            _run(self._cmd("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w",
                           "stop"), check=False, timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def _cmd(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bindir / tool), *args]
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else cmd


def _run(cmd: list[str], *, check: bool = True, timeout: float = 60,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin,
                          check=False)
    if check and proc.returncode != 0:
        raise ServiceUnavailable(f"{' '.join(cmd)} failed ({proc.returncode}): "
                                 f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def start_postgres() -> PostgresInstance:
    """initdb + pg_ctl start on a free port; a `tracker` user with a random password."""
    bindir = _pg_bindir()
    as_postgres = os.geteuid() == 0
    if as_postgres and shutil.which("runuser") is None:
        raise ServiceUnavailable("running as root without `runuser`: cannot run initdb as postgres")
    root = Path(tempfile.mkdtemp(prefix="tracker-pg-"))
    inst = PostgresInstance(root=root, port=free_port(), password="pw-" + secrets.token_hex(8),
                            bindir=bindir, as_postgres=as_postgres)
    atexit.register(inst.stop)
    try:
        inst.socket_dir.mkdir()
        if as_postgres:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(inst.socket_dir, "postgres", "postgres")
            os.chmod(root, 0o755)
        _run(inst._cmd("initdb", "-D", str(inst.data_dir), "-U", "postgres", "--no-sync",
                       "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                       "--no-instructions"), timeout=120)
        inst.start()
        inst.admin_sql(f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{inst.password}'")
    except (ServiceUnavailable, OSError, subprocess.SubprocessError) as exc:
        log = root / "server.log"
        tail = log.read_text()[-800:] if log.exists() else ""
        inst.stop()
        raise ServiceUnavailable(f"cannot start PostgreSQL: {exc}\n{tail}") from exc
    return inst


@dataclass
class MlflowServer:
    """A running `mlflow server` (its own process group), ``uri`` is its http address."""

    proc: subprocess.Popen[bytes]
    uri: str
    root: Path
    log_path: Path

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # uvicorn workers left in the group after the parent exited
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def start_mlflow_server(backend_uri: str | None = None, timeout_s: float = 90) -> MlflowServer:
    """`mlflow server` on 127.0.0.1:<free port>, sqlite backend (unless given), artifacts
    served from a temporary folder (--serve-artifacts)."""
    root = Path(tempfile.mkdtemp(prefix="tracker-mlflow-"))
    backend = backend_uri or f"sqlite:///{root / 'mlflow.db'}"
    port = free_port()
    log_path = root / "server.log"
    bindir = Path(sys.executable).parent
    mlflow_bin = bindir / "mlflow"
    cmd = [str(mlflow_bin) if mlflow_bin.exists() else "mlflow", "server",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", backend, "--serve-artifacts",
           "--artifacts-destination", str(root / "artifacts")]
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    # the job runner (huey consumers) is for GenAI evaluation jobs; nothing here uses it
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env,
                                start_new_session=True)
    server = MlflowServer(proc=proc, uri=f"http://127.0.0.1:{port}", root=root,
                          log_path=log_path)
    atexit.register(server.stop)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise ServiceUnavailable(f"mlflow server exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(server.uri + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.3)
    tail = server.log_tail()
    server.stop()
    raise ServiceUnavailable(f"mlflow server not healthy after {timeout_s:.0f}s:\n{tail}")


def group_pids(pgid: int) -> list[int]:
    """Process ids whose process group is ``pgid`` (a server started with start_new_session)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                found.append(proc.pid)
    return found


def still_running(pids: list[int], wait_s: float = 5.0) -> list[int]:
    """Those of ``pids`` still alive (zombies count as gone) after waiting up to ``wait_s``."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)
