"""Load spread over several processes, behind the same interface as one in-process load.

One Python process runs out of CPU long before a server with many instances does. With
``load.processes: N`` the level is split (concurrency divided, rate divided with staggered
phases) over N spawned processes, each with its own event loop and channel; the parent sends
commands over a pipe (start, take, completed, stop, close) and merges what they return.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol

from tracker.errors import MeasurementError
from tracker.measure.kinds.load_kind import LoadKind
from tracker.measure.loadgen import Chunk, Level, LocalLoad, split_level
from tracker.measure.transport import Payload, make_transport
from tracker.triton.tls import Security

SPAWN_TIMEOUT_S = 120.0


class Load(Protocol):
    """What the level runner drives: one process or several."""

    processes: int

    async def start(self, level: Level) -> None: ...
    async def take(self, until_ns: int) -> Chunk: ...
    async def completed(self) -> int: ...
    async def stop(self) -> None: ...
    async def close(self) -> None: ...


class InProcessLoad:
    """A :class:`LocalLoad` in the caller's own event loop."""

    processes = 1

    def __init__(self, local: LocalLoad) -> None:
        self.local = local

    async def start(self, level: Level) -> None:
        await self.local.start(level)

    async def take(self, until_ns: int) -> Chunk:
        return self.local.take(until_ns)

    async def completed(self) -> int:
        return self.local.completed()

    async def stop(self) -> None:
        await self.local.stop()

    async def close(self) -> None:
        await self.local.close()


class _AsyncConn:
    """Request/reply over a Pipe without blocking the event loop (one request at a time)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        asyncio.get_running_loop().add_reader(conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            msg: Any = self.conn.recv()
        except (EOFError, OSError) as exc:
            msg = ("error", f"load process ended unexpectedly ({type(exc).__name__})")
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
        self._inbox.put_nowait(msg)

    async def request(self, msg: tuple[Any, ...], timeout_s: float) -> Any:
        self.conn.send(msg)
        return await self.recv(timeout_s)

    async def recv(self, timeout_s: float) -> Any:
        try:
            reply = await asyncio.wait_for(self._inbox.get(), timeout_s)
        except asyncio.TimeoutError as exc:
            raise MeasurementError(f"a load process did not answer within {timeout_s:g} s") \
                from exc
        if isinstance(reply, tuple) and reply and reply[0] == "error":
            raise MeasurementError(f"a load process failed: {reply[1]}")
        return reply

    def detach(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
        self.conn.close()


def _child_main(conn: Connection, kinds: tuple[LoadKind, ...], protocol: str, url: str,
                model_name: str, timeout_s: float, payloads: list[Payload],
                security: Security | None = None) -> None:
    """Entry point of a load process (``kinds`` as that process's: ``LoadKind.for_process``):
    serve the parent's commands until "close"."""
    try:
        asyncio.run(_child(conn, protocol, url, model_name, timeout_s, payloads, kinds,
                           security))
    except Exception:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc(limit=3)))


async def _child(conn: Connection, protocol: str, url: str, model_name: str, timeout_s: float,
                 payloads: list[Payload], kinds: tuple[LoadKind, ...],
                 security: Security | None = None) -> None:
    options = {k: v for kind in kinds for k, v in kind.caller_options().items()}
    load = LocalLoad(make_transport(protocol, url, model_name, timeout_s, **options,
                                    security=security), payloads, kinds)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    def readable() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(("close",))

    loop.add_reader(conn.fileno(), readable)
    conn.send(("ready",))
    while True:
        cmd, *args = await inbox.get()
        if cmd == "start":
            await load.start(args[0])
            conn.send(("ok",))
        elif cmd == "take":
            conn.send(load.take(args[0]))
        elif cmd == "completed":
            conn.send(load.completed())
        elif cmd == "stop":
            await load.stop()
            conn.send(("ok",))
        elif cmd == "close":
            await load.close()
            with contextlib.suppress(OSError):
                conn.send(("ok",))
            return


class ProcessLoad:
    """``processes`` spawned load processes; call :meth:`open` inside the event loop."""

    def __init__(self, processes: int, protocol: str, url: str, model_name: str,
                 timeout_s: float, payloads: Sequence[Payload],
                 kinds: tuple[LoadKind, ...], security: Security | None = None) -> None:
        if processes < 2:
            raise MeasurementError(f"ProcessLoad needs >= 2 processes, but got {processes}")
        self.processes = processes
        self._args = (protocol, url, model_name, timeout_s, list(payloads), security)
        self.kinds = kinds
        self.timeout_s = timeout_s
        self._procs: list[Any] = []
        self._conns: list[_AsyncConn] = []

    async def open(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        for index in range(self.processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child_main, daemon=True, name="tracker-load", args=(
                child, tuple(k.for_process(index) for k in self.kinds), *self._args))
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(_AsyncConn(parent))
        try:
            await asyncio.gather(*(c.recv(SPAWN_TIMEOUT_S) for c in self._conns))
        except BaseException:
            await self.close()
            raise

    async def _all(self, msg: tuple[Any, ...], timeout_s: float | None = None) -> list[Any]:
        wait = timeout_s if timeout_s is not None else self.timeout_s + 30.0
        return list(await asyncio.gather(*(c.request(msg, wait) for c in self._conns)))

    async def start(self, level: Level) -> None:
        if level.request_rate is not None and level.start_ns <= 0:  # one time zero for all
            level = dataclasses.replace(level, start_ns=time.perf_counter_ns() + 50_000_000)
        parts = split_level(level, self.processes, self.kinds)
        await asyncio.gather(*(c.request(("start", p), 30.0)
                               for c, p in zip(self._conns, parts, strict=True)))

    async def take(self, until_ns: int) -> Chunk:
        return Chunk.merge(await self._all(("take", until_ns), 30.0))

    async def completed(self) -> int:
        return sum(await self._all(("completed",), 30.0))

    async def stop(self) -> None:
        await self._all(("stop",))

    async def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(MeasurementError, OSError):
                await conn.request(("close",), 10.0)
            conn.detach()
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        self._conns, self._procs = [], []
