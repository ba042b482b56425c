"""Disks that refuse writes for real: a read-only folder and a full one.

The tests run as root here, and root ignores permission bits, so ``chmod 0555`` proves
nothing for root. As root, a read-only folder is a tmpfs mounted ``ro`` (EROFS) and a full one
a small tmpfs filled to the last block (ENOSPC); without root, ``chmod 0555`` (EACCES) is
real. Where neither works (root in a container without CAP_SYS_ADMIN), the test is skipped
with the reason. Every mount is undone when the block ends, failures included.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"


def _mount(path: Path, options: str) -> str | None:
    """Mount a tmpfs at ``path`` (an existing empty folder); None, or why it cannot."""
    if shutil.which("mount") is None:
        return "no mount command"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else (done.stderr.strip() or f"status {done.returncode}")


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


@contextlib.contextmanager
def read_only_folder(path: Path) -> Iterator[Path]:
    """``path``, made (empty) and read-only for this process: writing into it fails with
    EROFS (root: a read-only tmpfs) or EACCES (any other user: mode 0555)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    why = _mount(path, "ro,size=1m,mode=0755")
    if why is not None:
        pytest.skip(f"as root, a read-only folder needs a read-only tmpfs mount: {why}")
    try:
        yield path
    finally:
        _unmount(path)


@contextlib.contextmanager
def full_folder(path: Path, size_kib: int = 1024) -> Iterator[Path]:
    """``path``, an empty tmpfs of ``size_kib`` KiB, not yet full (:func:`fill` fills it,
    :func:`free` frees it)."""
    path.mkdir(parents=True, exist_ok=True)
    why = _mount(path, f"size={size_kib}k,mode=0755")
    if why is not None:
        pytest.skip(f"a full disk needs a small tmpfs mount (root with CAP_SYS_ADMIN): {why}")
    try:
        yield path
    finally:
        _unmount(path)


def fill(path: Path) -> None:
    """Fill the file system of ``path`` to its last byte (a file ``.filler`` in it)."""
    with open(path / FILLER, "ab", buffering=0) as fh:
        for size in (1 << 16, 4096, 1):
            try:
                while fh.write(b"\0" * size):
                    pass
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    stat = os.statvfs(path)
    assert stat.f_bavail == 0, f"{path} still has {stat.f_bavail} free blocks"


def free(path: Path) -> None:
    (path / FILLER).unlink(missing_ok=True)
