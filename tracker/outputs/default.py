"""``tracker check SPEC --outputs``: the default configuration served, asked the output
check's probes twice (docs/output-check.md).

What it finds before a study starts: probes the model refuses (``load.input_data`` rows it
rejects are an error here, not 40 failed trials later), and outputs that differ between two
calls of the same configuration (sampling, timestamps, noise), for which it proposes
``check.outputs: {ignore: [...]}`` or ``check.outputs: false``. Without ``--outputs``,
:func:`static_check` checks what needs no server: the probes can be built from the data and
``check.outputs.ignore`` names outputs of the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracker.candidate.measurement import resolve_serving, serve_options
from tracker.errors import MeasurementError, SpecError
from tracker.invocation.session import Session
from tracker.outputs import probes
from tracker.outputs.probes import ProbeSet, Tolerance
from tracker.outputs.trials import (
    answers_of,
    make_probes,
    output_names,
    probe_client,
    sequence_kind,
    tolerance,
)
from tracker.spec import StudySpec
from tracker.triton.configuration import Configuration
from tracker.triton.repository import TrialRepository, write_configuration
from tracker.triton.sequence import is_decoupled, is_iterative

if TYPE_CHECKING:
    from tracker.triton.server.base import TritonServer


def static_check(spec: StudySpec, conf: Configuration) -> str:
    """SpecError for an ``ignore`` naming no output or data rows that make no probe; else
    the summary line of the output check."""
    config = conf.entry_info.config
    out = spec.check.outputs
    if not out.enabled:
        return "output check: off (check.outputs: false)"
    try:
        inputs = make_probes(spec, config)
    except MeasurementError as err:
        where = "load.input_data" if spec.load.input_data is not None else "the model's inputs"
        raise SpecError([f"{where}: cannot make the output check's probes: {err}"]) from err
    names = output_names(spec, config)
    source = "rows of load.input_data" if spec.load.input_data is not None else \
        f"inputs drawn from seed {spec.search.seed or 0}"
    if sequence_kind(config):
        steps = sorted({len(next(iter(p.values()))[1]) for p in inputs})
        source = f"whole sequences of {'/'.join(map(str, steps))} steps from {source}"
        if is_decoupled(config):
            source += ", each step streamed, the answer every step's responses"
    elif is_iterative(config):
        source = ("one streamed request each, a whole sequence that the model reschedules "
                  "until it ends")
    elif is_decoupled(config):
        source = "the load's first requests, each answered by its whole response stream"
    ignored = f"; ignored outputs: {', '.join(out.ignore)}" if out.ignore else ""
    return (f"output check: {_probes(len(inputs))} ({source}), outputs {names} within "
            f"rtol {out.rtol:g}, atol {out.atol:g}{ignored}")


def probe_default(spec_path: str | Path) -> str:
    """Serve the default configuration, ask the probes twice, and say what differs. A
    stateful model is served again between the two asks, so the second sends its sequences
    under the same correlation IDs to a fresh load of the model."""
    session = Session.open(spec_path, work_prefix="check-")
    with session.guarded():
        spec = session.spec
        server = session.start_server()
        repo = serve_default(session, server)
        with probe_client(spec, server) as client:
            config = client.model_config(repo.model_name)
            first = answers_of(spec, client, repo.model_name, config)
        if first.sequence:  # a fresh load: a model may keep each sequence's state for ever
            repo = serve_default(session, server, session.workdir / "default-again")
        with probe_client(spec, server) as client:
            second = first.ask(client, repo.model_name)
        return _verdict(spec, first, second)


def serve_default(session: Session, server: TritonServer,
                  folder: Path | None = None) -> TrialRepository:
    """The default configuration written into ``folder`` (default: ``default`` in the
    session's work folder) and served."""
    spec, conf = session.spec, session.configuration
    repo = write_configuration(folder or session.workdir / "default",
                               {n: conf.info(n) for n in conf.names},
                               conf.defaults(), conf.entry,
                               serving=resolve_serving(spec, server, conf),
                               options=serve_options(spec))
    server.apply_trial(repo)
    return repo


def _verdict(spec: StudySpec, first: ProbeSet, second: list[probes.Answer]) -> str:
    for i, answer in enumerate(first.answers):
        if isinstance(answer, str):
            where = "load.input_data" if spec.load.input_data is not None else "probe"
            raise SpecError([f"{where}: the default configuration rejects probe {i} "
                             f"(row {i}): {answer}"])
    tol = tolerance(spec) or Tolerance(0.0, 0.0)
    differ = [name for name in first.outputs
              if not probes.compare(ProbeSet(first.inputs, [name], first.answers), second,
                                    tol).passed]
    if not differ:
        return (f"the default configuration answered {_probes(len(first.inputs))} the same "
                f"twice: its outputs {first.outputs} are checked on every trial")
    if len(differ) == len(first.outputs):
        proposal = "check.outputs: false"
    else:
        proposal = f"check.outputs: {{ignore: [{', '.join(differ)}]}}"
    return (f"the default configuration answered differently on two calls in outputs "
            f"{differ} (not deterministic); every trial would fail its output check. Add "
            f"to the spec: `{proposal}`")


def _probes(n: int) -> str:
    return f"{n} probe{'s' * (n != 1)}"
