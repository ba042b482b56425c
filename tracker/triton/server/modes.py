"""``make_server``: the launcher of a spec's ``server.mode``, from tracker/launch_modes.py."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tracker.errors import ServerError
from tracker.launch_modes import MODES
from tracker.triton.server.options import trial_args

if TYPE_CHECKING:
    from tracker.spec import ServerSection
    from tracker.triton.server.base import TritonServer


def make_server(server: ServerSection) -> TritonServer:
    """The launcher ``server.mode`` names, configured from the spec's server section."""
    entry = MODES.get(server.mode)
    if entry is None:
        raise ServerError(f"server.mode must be one of {', '.join(MODES)}, but got "
                          f"{server.mode!r}")
    module, _, name = entry.implementation.partition(":")
    cls = getattr(importlib.import_module(module), name)
    made: TritonServer = cls.from_spec(server)
    made.option_args = trial_args(server)  # server.options; a trial may change them
    if (server.tls is not None or server.headers) and server.mode != "remote":
        from tracker.triton.server.launcher import Launcher  # started with TLS options
        from tracker.triton.tls import Security

        if isinstance(made, Launcher):
            made.security = Security.of(server.tls, server.headers)
    return made
