"""Ports for a server this process launches: free ones picked by the OS, fixed ones checked,
and who listens on a port once the server runs (a free port may be taken by someone else
before the server binds it)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys

from tracker.errors import ServerStartError

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picked them)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Raise :class:`ServerStartError` naming ``what`` when ``port`` is taken on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ServerStartError(f"server.{what} {port} is taken on {host} ({exc.strerror}): "
                                   "free it or choose another port (or leave it unset to "
                                   "pick a free one)") from exc


def resolve_ports(http: int | None, grpc: int | None, metrics: int | None,
                  host: str = "127.0.0.1") -> tuple[int, int, int]:
    """The fixed ports (checked free) with free ones filling the gaps."""
    fixed = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics}
    for what, port in fixed.items():
        if port is not None:
            check_port_free(port, what, host)
    spare = iter(p for p in free_ports(6, host) if p not in fixed.values())
    return (http or next(spare), grpc or next(spare), metrics or next(spare))


def listening_sockets(port: int, host: str = "127.0.0.1") -> set[int] | None:
    """Inodes of the TCP sockets listening on ``port`` that a connection to ``host`` (an
    IPv4 address) may reach: bound to it, to 0.0.0.0 or ::, or to ``::ffff:<host>``;
    whoever holds them (``/proc/net/tcp``, ``tcp6``). None where /proc cannot tell."""
    v4 = _proc_hex(socket.inet_aton(host))
    addrs = {v4, "0" * 8, "0" * 32, _proc_hex(socket.inet_pton(socket.AF_INET6, "::ffff:" + host))}
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            if table.endswith("6"):  # no IPv6 here
                continue
            return None
        for cols in rows:  # sl, local address:port, remote, state, ..., inode
            addr, _, hexport = cols[1].partition(":")
            if len(cols) > 9 and cols[3] == _LISTEN and addr in addrs and int(hexport, 16) == port:
                found.add(int(cols[9]))
    return found


def _proc_hex(packed: bytes) -> str:
    """An address as /proc/net/tcp* prints it: 32-bit words in the host's byte order."""
    return "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}"
                   for i in range(0, len(packed), 4))


def sockets_of(pids: list[int]) -> set[int]:
    """Inodes of the sockets that processes ``pids`` hold open (those this user may read)."""
    found: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    found.add(int(link[8:-1]))
    return found
