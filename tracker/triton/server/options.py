"""What a spec asks of the server, checked against it: the flags of a trial's server options
(tracker/spec/server_options.py), passthrough flags against what the server's own ``--help``
lists, and ``instance_group[i].gpus`` indices against the GPUs the server is given."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tracker.spec.fields import closest, plain_path
from tracker.tags import SERVER_FLAGS, SERVER_RESTART

if TYPE_CHECKING:
    from tracker.spec import ServerSection
    from tracker.triton.gpus import GpuSet
    from tracker.triton.repository import TrialRepository
    from tracker.triton.server.base import TritonServer


def trial_args(server: ServerSection, values: Mapping[str, object] | None = None
               ) -> tuple[str, ...]:
    """The tritonserver flags of ``server.options`` with a trial's ``server/<option>``
    values set (None or {}: the options as the spec gives them)."""
    options = server.options.with_values(values) if values else server.options
    gpus = len(server.gpus) if isinstance(server.gpus, list) else 1
    return tuple(options.args(gpus=gpus))


def unknown_flag(server: ServerSection, triton: TritonServer) -> str | None:
    """Why a flag of ``server.options.flags`` is refused: the server's ``--help`` does not
    list it (None when all are listed, or the server cannot be asked before it runs)."""
    wanted = list(server.options.flags)
    if not wanted:
        return None
    known = triton.known_flags()
    if known is None:
        return None
    for flag in wanted:
        if flag not in known:
            guess = closest(flag, sorted(known))
            hint = f"; did you mean {guess!r}?" if guess else ""
            return (f"server.options.flags.{flag}: this tritonserver does not know the flag "
                    f"(its --help does not list it){hint}")
    return None


def option_tags(flags: Sequence[str], restarted: bool) -> dict[str, str]:
    """The run tags that say which server flags a measurement ran with, and why the server
    was restarted for it."""
    out = {SERVER_FLAGS: " ".join(flags)} if flags else {}
    if restarted:
        out[SERVER_RESTART] = ("server options changed: Triton restarted with "
                               + (" ".join(flags) or "no option flags"))
    return out


def gpu_index_problem(space: Mapping[str, object], gpus: GpuSet) -> str | None:
    """Why an ``instance_group[i].gpus`` choice of the space names a GPU the server does not
    have (it sees ``len(gpus)`` of them, numbered from 0); None when every choice is one."""
    for key, knob in space.items():
        if plain_path(key.rpartition("/")[2]) != "instance_group.gpus":
            continue
        values = knob if isinstance(knob, list) else [getattr(knob, "low", 0),
                                                      getattr(knob, "high", 0)]
        bad = sorted({v for v in values if isinstance(v, int) and v >= len(gpus)})
        if bad:
            have = (f"its {len(gpus)} GPU(s) are numbered 0..{len(gpus) - 1}" if gpus
                    else "it has no GPU")
            return (f"search.space.{key}: GPU index {bad[-1]} is not one of the server's GPUs "
                    f"({have}; {gpus.source or 'as the launcher sees them'})")
    return None


def server_problem(section: ServerSection, space: Mapping[str, object],
                   triton: TritonServer) -> str | None:
    """What ``triton`` refuses of the spec before it starts: an unknown passthrough flag, a
    ``gpus`` index it lacks; None when nothing."""
    return unknown_flag(section, triton) or gpu_index_problem(space, triton.gpu_set())


def serve_trial(triton: TritonServer, repo: TrialRepository, section: ServerSection,
                values: Mapping[str, object] | None,
                on_phase: Callable[[str], None] | None = None) -> dict[str, str]:
    """Serve a trial's repository with its option flags (``section.options`` with the
    trial's ``server/<option>`` ``values``): a change restarts the server, and ``on_phase``
    says so. The run tags of :func:`option_tags`."""
    flags = trial_args(section, values)
    said = option_tags(flags, triton.apply_trial(repo, flags))
    if SERVER_RESTART in said and on_phase is not None:
        on_phase(said[SERVER_RESTART])
    return said
