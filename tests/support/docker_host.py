"""The Docker daemon and a local Triton test image for the docker tests.

No registry is reachable here, so the image is made from files on this machine: the
nvidia-pytriton wheel's ``tritonserver`` laid out like the official image (``tritonserver`` on
PATH under /opt/tritonserver, backends in /opt/tritonserver/backends), the running Python
(stdlib without tests), a small venv with numpy and onnxruntime, bash (the Python backend starts
its stub through it) and the shared libraries ``ldd`` names for all of them. The tag carries a
hash of the inputs, so a later session reuses the image (``docker import`` of a rootfs tarball).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

IMAGE_REPO = "tracker-triton-test"
BUILDER_VERSION = "4"
SOCKET = Path("/var/run/docker.sock")
VENV_IN_IMAGE = "/opt/tracker-venv"
LINK = "@link:"  # a plan entry whose "source" is a symlink target inside the image
SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
             "site-packages", "config-3.11-x86_64-linux-gnu"}


class DockerUnavailable(Exception):
    """The daemon cannot be started or reached here (the reason is the message)."""


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes] | None  # None: it was already running (not ours to stop)
    log: IO[bytes] | None = None

    def stop(self) -> None:
        if self.log is not None:
            self.log.close()
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _ping() -> bool:
    if not SOCKET.exists():  # (a client made for a missing socket leaks it)
        return False
    import docker

    try:
        client = docker.from_env(timeout=5)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


def start_daemon(timeout_s: float = 30.0) -> Daemon:
    """Use a running daemon, or start ``dockerd`` (vfs, no iptables/bridge) as root."""
    if _ping():
        return Daemon(None)
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise DockerUnavailable("dockerd is not installed (scripts/system-deps.sh installs "
                                "docker.io as root)")
    if os.geteuid() != 0:
        raise DockerUnavailable("dockerd needs root here and this user is not root")
    log = open(Path(tempfile.gettempdir()) / "tracker-dockerd.log", "ab")  # noqa: SIM115 (Daemon closes it)
    proc = subprocess.Popen([dockerd, "--storage-driver=vfs", "--iptables=false",
                             "--bridge=none"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise DockerUnavailable(f"dockerd exited with status {proc.returncode} (see "
                                    f"{log.name})")
        if _ping():
            return Daemon(proc, log)
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    log.close()
    raise DockerUnavailable(f"dockerd did not answer within {timeout_s:g} s")


# ---- the test image -----------------------------------------------------------------------

def _wheel_root() -> Path:
    import pytriton

    return Path(pytriton.__file__).resolve().parent


def _ldd(paths: list[Path], env: dict[str, str]) -> set[Path]:
    found: set[Path] = set()
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env).stdout
        for line in out.splitlines():
            parts = line.split("=>")
            target = (parts[1] if len(parts) > 1 else parts[0]).strip().split(" (")[0].strip()
            if target.startswith("/"):
                found.add(Path(target))
    return found


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        out.extend(Path(dirpath) / f for f in filenames
                   if not f.endswith((".opt-1.pyc", ".opt-2.pyc")) and "tkinter" not in f)
    return out


def _plan() -> dict[str, Path]:
    """arcname (path inside the image) -> source file on this machine."""
    wheel = _wheel_root() / "tritonserver"
    site = _wheel_root().parent
    libs = site / "nvidia_pytriton.libs"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    plan: dict[str, Path] = {"opt/tritonserver/bin/tritonserver": wheel / "bin" / "tritonserver"}
    for f in libs.iterdir():
        plan[f"opt/tritonserver/lib/{f.name}"] = f
    for f in (wheel / "backends" / "python").iterdir():
        if f.is_file():
            plan[f"opt/tritonserver/backends/python/{f.name}"] = f
    stub = wheel / "python_backend_stubs" / py / "triton_python_backend_stub"
    plan["opt/tritonserver/backends/python/triton_python_backend_stub"] = stub
    base = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix,
                                            "platbase": sys.base_prefix})["stdlib"])
    for f in _files(stdlib):
        plan[str(f.relative_to("/"))] = f
    python = base / "bin" / f"python{py}"
    plan[str(python.relative_to("/"))] = python
    libdir = Path(str(sysconfig.get_config_var("LIBDIR")))
    for f in libdir.glob(f"libpython{py}*.so*"):
        plan[str(f.resolve().relative_to("/"))] = f.resolve()
    sp = f"{VENV_IN_IMAGE.lstrip('/')}/lib/python{py}/site-packages"
    for pkg in ("numpy", "numpy.libs", "onnxruntime"):
        src = site / pkg
        if src.is_dir():
            for f in _files(src):
                plan[f"{sp}/{f.relative_to(site)}"] = f
    bash = Path(shutil.which("bash") or "/bin/bash").resolve()
    plan[str(bash.relative_to("/"))] = bash
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libs}:{libdir}"}
    elf = [p for p in plan.values() if p.suffix == ".so" or ".so." in p.name
           or p.name in ("tritonserver", "triton_python_backend_stub", f"python{py}", "bash")]
    for lib in _ldd(elf, env):
        if site in lib.parents or lib.name.startswith("libpython"):
            continue  # copied above with the package that holds it
        real = lib.resolve()
        plan[str(real.relative_to("/"))] = real
        # the name the loader looks for, under the real directory (/lib -> usr/lib is a link)
        named = Path(os.path.realpath(lib.parent)) / lib.name
        if named != real:
            plan[str(named.relative_to("/"))] = Path(LINK + str(real))
    return plan


def _digest(plan: dict[str, Path]) -> str:
    h = hashlib.sha256(BUILDER_VERSION.encode())
    for arc in sorted(plan):
        if str(plan[arc]).startswith(LINK):
            h.update(f"{arc}->{plan[arc]}\n".encode())
            continue
        st = plan[arc].stat()
        h.update(f"{arc}|{st.st_size}|{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:12]


def _write_tar(plan: dict[str, Path], out: Path) -> None:
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    with tarfile.open(out, "w") as tar:
        for name in ("bin", "lib", "lib64", "sbin"):  # Debian's merged /usr
            if Path("/" + name).is_symlink():
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink("/" + name)
                tar.addfile(info)
        for name in ("tmp", "dev/shm"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        cfg = (f"home = {base / 'bin'}\ninclude-system-site-packages = false\n"
               f"version = {py}\n").encode()
        info = tarfile.TarInfo(f"{VENV_IN_IMAGE.lstrip('/')}/pyvenv.cfg")
        info.size = len(cfg)
        import io

        tar.addfile(info, io.BytesIO(cfg))
        for link in ("python", "python3", f"python{py}"):
            info = tarfile.TarInfo(f"{VENV_IN_IMAGE.lstrip('/')}/bin/{link}")
            info.type, info.linkname = tarfile.SYMTYPE, str(base / "bin" / f"python{py}")
            tar.addfile(info)
        for arc in sorted(plan):
            src = str(plan[arc])
            if src.startswith(LINK):
                info = tarfile.TarInfo(arc)
                info.type, info.linkname = tarfile.SYMTYPE, src[len(LINK):]
                tar.addfile(info)
            else:
                tar.add(src, arcname=arc, recursive=False)


def ensure_image(client: Any) -> str:
    """The tag of the test image, built now unless an image with the same inputs exists."""
    from docker.errors import ImageNotFound

    plan = _plan()
    tag = f"{IMAGE_REPO}:{_digest(plan)}"
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    libdir = str(sysconfig.get_config_var("LIBDIR"))
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "rootfs.tar"
        _write_tar(plan, tar)
        changes = [
            f"ENV PATH={VENV_IN_IMAGE}/bin:/opt/tritonserver/bin:/usr/bin:/bin",
            f"ENV LD_LIBRARY_PATH=/opt/tritonserver/lib:{libdir}",
            "LABEL tracker.triton.backends=python",
            f"LABEL tracker.test.host={socket.gethostname()}",
        ]
        repo, _, version = tag.partition(":")
        client.api.import_image_from_file(str(tar), repository=repo, tag=version,
                                          changes=changes)
    return tag


def remove_old_images(client: Any, keep: str) -> None:
    """Drop earlier test images (other content hashes) so the vfs store does not grow."""
    for image in client.images.list(name=IMAGE_REPO):
        if keep not in image.tags:
            try:
                client.images.remove(image.id, force=True)
            except Exception:
                continue


def managed_containers(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": "tracker.managed"}))


if __name__ == "__main__":  # build (or find) the image and print its tag and the build time
    daemon = start_daemon()
    try:
        import docker

        t0 = time.perf_counter()
        print(ensure_image(docker.from_env()), f"{time.perf_counter() - t0:.1f} s")
    finally:
        daemon.stop()
