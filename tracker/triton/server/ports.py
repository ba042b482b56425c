"""Ports for a server this process launches: free ones picked by the OS, fixed ones checked."""

from __future__ import annotations

import socket

from tracker.errors import ServerStartError


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
