"""The launch modes (``server.mode``): one entry per way of getting a Triton server.

Each names the :class:`~tracker.triton.server.base.TritonServer` implementation that serves
it (``module:Class``, imported only when the mode is used; the class has
``from_spec(server_section)``). The spec's ``server.mode`` choices, the CLI's ``--mode``
choices, ``tracker check``'s description and ``make_server`` all read this table.

Adding a launch mode: one module with the implementation (tracker/triton/server/) and one
:class:`LaunchMode` line here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchMode:
    name: str
    implementation: str                        # "package.module:Class"
    shows: str | None = None                   # server.* field `tracker check` shows
    text: str = ""                             # else this description
    restarts: bool = True                      # False: someone else's server (reload only)
    requires: tuple[tuple[str, str], ...] = ()  # (server.* field, what it holds)
    knows_backends: bool = True                # its backends are known before it serves


MODES: dict[str, LaunchMode] = {m.name: m for m in (
    LaunchMode("local", "tracker.triton.server.local:LocalTritonServer",
               text="tritonserver process on this machine"),
    LaunchMode("docker", "tracker.triton.server.docker:DockerTritonServer", shows="image"),
    LaunchMode("remote", "tracker.triton.server.remote:RemoteTritonServer", shows="url",
               restarts=False, requires=(("url", "gRPC host:port, e.g. 'triton.example:8001'"),),
               knows_backends=False),
)}
NAMES: tuple[str, ...] = tuple(MODES)


def describe(mode: str, server: object) -> str:
    """Where the trials' server runs, in words (``tracker check``)."""
    entry = MODES[mode]
    return str(getattr(server, entry.shows)) if entry.shows else entry.text
