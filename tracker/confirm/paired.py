"""The paired design of the confirmation: the best configuration and the default side by side.

Rounds (:mod:`tracker.confirm.rounds`) serve one configuration at a time, so minutes pass
between the best's measurement and the default's, and a neighbour's burst hits one and not the
other. Here both are loaded into one server as two copies of the model under two names
(``<model>__default`` and ``<model>__best``), and the load alternates between them in short
blocks, the order within a pair alternating from pair to pair (:func:`order_of`). A pair is
one round of the record: one reading of each copy taken seconds apart, so what the machine
does to one it does to the other and it cancels in the pair's ratio. The verdict
(:mod:`tracker.verdict.stats`) is then the same as for rounds, on the pairs.

Pairing cannot hold (:func:`choose` says why, and the confirmation runs in rounds) when

- the best differs from the default in a server option (a knob ``server/<option>``): one
  server cannot run with both values;
- the configuration has a BLS model (its code names the models it calls, so its copy would
  call the default's); a pipeline of ensembles pairs: each copy's models are renamed
  (``<model>__best``) and its steps call its own copies. Several entry models pair too: a
  block loads every entry of one copy at once, each at its own level, and a pair's
  ``weighted_gain`` is the best block's against the default block of the same pair;
- the two copies do not fit in GPU memory together (each trial's ``gpu_used_memory`` against
  the server's GPUs' total, from NVML);
- ``confirm.design: rounds`` asks for rounds;
- the objective is ``perf_capacity``: each configuration's capacity is searched on its own
  (tracker/search/capacity.py), so a round searches both in turn.

After each load both copies run together for :data:`WARM_S` seconds, unmeasured. A block is the
spec's load at the level each configuration was judged by, warmed by a few requests (the
batcher's ramp) and then :data:`WINDOWS` windows; the window is sized from the
search's throughput so that a block holds about :data:`BLOCK_REQUESTS` requests
(docs/confirmation.md says what they do; CHANGELOG.md how they were chosen).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.candidate import entries as joint
from tracker.candidate.measurement import serve_options
from tracker.candidate.values import configs, file_values
from tracker.errors import TrackerError
from tracker.measure.entry import EntryLoad
from tracker.measure.sweep import sweep
from tracker.metrics import CAPACITY, RELATIVE, fmt
from tracker.search.objective import Scoring, pick_best_level
from tracker.triton.formats.ensemble import renamed
from tracker.triton.repository import TrialRepository, write_model
from tracker.verdict.record import JOINT, LATENCY, Reading, RoundEntry

if TYPE_CHECKING:
    from tracker.invocation.session import StudyContext
    from tracker.measure.types import SweepLevel
    from tracker.trial_record import TrialRow
    from tracker.triton.model_config import ModelConfig

PAIRED, ROUNDS, AUTO = "paired", "rounds", "auto"
DESIGNS = (AUTO, PAIRED, ROUNDS)
#: knobs of the server's command line (``server/<option>``): one server cannot hold two values
SERVER_KNOB = "server/"
#: windows per block (the stability rule's three; a block is not retried)
WINDOWS = 3
#: pairs between two loads of the copies (:meth:`Pairs.reload`): 4, not 3, so that a
#: confirmation that decides in 4 pairs (most of the README study's) pays for one load and one
#: warm-up, not two (docs/confirmation.md, "Paired")
RELOAD_PAIRS = 4
#: requests a block aims at (its windows together), and the window's lower bound in ms (the
#: upper: the spec's window_ms). 200 ms windows (0.6 s blocks) of the quickstart model at load
#: 15 gave pair ratios from 0.23 to 2.02; at load 4 the quickstart's spread was 0.15 and 0.14
#: with 333 ms windows, 0.11 and 0.16 with 500 ms (two runs each). DenseNet's, one run each,
#: 0.079, 0.126 and 0.087 with 1, 0.5 and 0.33 s windows: no trend, while a pair of 1 s
#: windows costs 6.7 s against 3.7 s. 45 requests left DenseNet's windows at 0.8 s under the
#: benchmark's light neighbour (19 infer/s) and its confirmation at 29% of the study; 24 puts
#: them at the floor down to 16 infer/s: 21% (docs/confirmation.md, "Paired")
BLOCK_REQUESTS = 24
MIN_WINDOW_MS = 500
#: seconds both copies are loaded together, unmeasured, after each load before the first
#: block (:meth:`Pairs.warm`): without it, the first pair after a load read the quickstart's
#: 2-instance best against its default 9-18% higher than the two pairs after it, in 3 of 3
#: confirmations of 40 pairs; with it, 3-6% (docs/confirmation.md, "Paired")
WARM_S = 3.0
#: a GPU is "full" for two copies above this share of its memory
GPU_SHARE = 0.9
SUFFIX = {True: "__default", False: "__best"}
#: why ``design: auto`` goes on in rounds: the study's confirmation was recorded in rounds
RECORDED = ("in rounds, not paired: the study's confirmation of these configurations was "
            "recorded in rounds, so it goes on in rounds (`tracker confirm --new` starts a "
            "paired one)")


@dataclass(frozen=True)
class Design:
    """How the confirmation measures: ``paired`` or ``rounds``, and why in words."""

    name: str
    reason: str

    @property
    def paired(self) -> bool:
        return self.name == PAIRED


def server_options(params: Mapping[str, object]) -> dict[str, object]:
    """The server-option knobs (``server/<option>``) among a configuration's params."""
    return {k: v for k, v in params.items() if k.startswith(SERVER_KNOB)}


def option_difference(base: Mapping[str, object], best: Mapping[str, object]) -> str | None:
    """The first server option in which two configurations' params differ, in words (None:
    they run on the same server command line)."""
    a, b = server_options(base), server_options(best)
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return (f"{k} ({a.get(k, 'unset')!r} for the default, {b.get(k, 'unset')!r} "
                    "for the best)")
    return None


def too_big(used_mb: tuple[float | None, float | None], total_mb: float | None) -> str | None:
    """Why two copies using ``used_mb`` of GPU memory (each trial's ``gpu_used_memory``) do
    not fit in ``total_mb`` (None: they fit, or nothing is known: no GPU, no figure)."""
    if total_mb is None or total_mb <= 0 or any(u is None for u in used_mb):
        return None
    both = sum(u or 0.0 for u in used_mb)
    if both <= GPU_SHARE * total_mb:
        return None
    return (f"the two copies would need about {both:.0f} MB of GPU memory together, more than "
            f"{100 * GPU_SHARE:.0f}% of the {total_mb:.0f} MB the server's GPUs have")


def choose(ctx: StudyContext, rows: list[TrialRow], asked: str) -> Design:
    """The design for the default ``rows[0]`` and the search's best ``rows[1]``."""
    if asked == ROUNDS:
        return Design(ROUNDS, "confirm.design is rounds")
    base, best = rows[0], rows[1]
    why = None
    if CAPACITY in ctx.spec.objectives:
        why = ("a capacity is searched for each configuration on its own server: each round "
               "searches every configuration's in turn, each against the default's of the "
               "same round")
    elif (diff := option_difference(base.params, best.params)) is not None:
        why = f"the best differs from the default in a server option, {diff}"
    elif (problem := ctx.configuration.pairing_problem) is not None:
        why = problem
    else:
        why = too_big((base.metrics.get("gpu_used_memory"),
                       best.metrics.get("gpu_used_memory")), _gpu_total_mb(ctx))
    if why is not None:
        return Design(ROUNDS, f"in rounds, not paired: {why}")
    return Design(PAIRED, f"{best.name} and the default side by side in one server, in pairs "
                          "of short blocks, the order alternating")


def _gpu_total_mb(ctx: StudyContext) -> float | None:
    try:
        gpus = ctx.bench.server.gpu_set()
    except TrackerError:
        return None
    totals = [g.memory_total_mb for g in gpus]
    return sum(t for t in totals if t is not None) if totals and None not in totals else None


def window_ms(throughputs: list[float | None], longest: int) -> int:
    """The block's window: long enough for :data:`BLOCK_REQUESTS` requests over the block's
    windows at the slower configuration's search throughput, within [MIN_WINDOW_MS, the
    spec's window_ms]."""
    known = [t for t in throughputs if t]
    if not known:
        return longest
    want = 1000.0 * BLOCK_REQUESTS / WINDOWS / min(known)
    return int(min(max(want, MIN_WINDOW_MS), longest))


@dataclass
class Pairs:
    """The two copies served by the study's server, measured a pair at a time."""

    ctx: StudyContext
    rows: dict[int, TrialRow]         # by trial number: the default and the best
    window: int                       # ms
    #: by trial number: each entry's copy, by the copy's name: (the entry, its served config)
    served: dict[int, dict[str, tuple[str, ModelConfig]]] | None = None
    workdir: Path | None = None
    loads: int = 0                    # how often the two copies were loaded
    warmed: bool = False              # since the last load (:meth:`warm`)

    def setup(self, workdir: Path) -> None:
        """Write both copies into one repository and serve it (TrackerError when either
        copy does not load)."""
        self.workdir = workdir
        self.loads += 1
        if self.loads > 1:  # a fresh folder: the running server may still read the last
            workdir = workdir.with_name(f"{workdir.name}-{self.loads}")
        written: dict[int, list[TrialRepository]] = {
            n: self._write_copy(workdir, row) for n, row in self.rows.items()}
        every = [r for copy in written.values() for r in copy]
        repo = replace(every[-1], models=tuple((r.model_name, r.served_config) for r in every),
                       productions={r.model_name: r.production_config for r in every})
        self.ctx.bench.server.apply_trial(repo)
        conf = self.ctx.configuration
        self.served = {n: {r.model_name: (m, r.served_config)
                           for m, r in zip(conf.names, copy, strict=True) if m in conf.entries}
                       for n, copy in written.items()}
        self.warmed = False

    def _write_copy(self, workdir: Path, row: TrialRow) -> list[TrialRepository]:
        """Every model of ``row``'s configuration, renamed with its copy's suffix
        (``<model>__best``), an ensemble's steps calling the copy's own models; in load
        order, the entry last."""
        conf, suffix = self.ctx.configuration, SUFFIX[row.baseline]
        cfgs, _ = configs(self.ctx.bench, dict(row.params), row.baseline)
        names = {m: f"{m}{suffix}" for m in conf.names}
        files = file_values(dict(row.params), row.baseline)
        return [write_model(workdir, conf.info(m), renamed(cfgs[m], names[m], names),
                            serving=self.ctx.bench.serving, options=serve_options(self.ctx.spec),
                            files=files if m == conf.entry else None)
                for m in conf.names]

    def _entries(self, n: int, window: int, ramp: bool = True) -> dict[str, EntryLoad]:
        """Trial ``n``'s copy of each entry model, by the copy's name, under its own load at
        the level its trial was judged by: a short warm-up (the batcher's ramp; none without
        ``ramp``), then :data:`WINDOWS` windows of ``window`` ms, no retries."""
        assert self.served is not None
        conf, row = self.ctx.configuration, self.rows[n]
        out = {}
        for name, (entry, served) in self.served[n].items():
            load = self.ctx.spec.load.for_model(entry)
            level = float(row.metrics.get(conf.metric_name(entry, "concurrency"))
                          or row.concurrency or 1)
            warmup = min(load.warmup_requests, max(4, 2 * int(level))) if ramp else 0
            short = load.model_copy(update={
                "max_tries": WINDOWS, "window_ms": window, "window_requests": None,
                "warmup_requests": warmup})
            out[name] = EntryLoad(served, short, [level])
        return out

    def block(self, n: int) -> list[SweepLevel]:
        """One block of trial ``n``'s copy, every entry at once at its level (the sweep's one
        level)."""
        return sweep(self.ctx.bench.server.endpoints, self._entries(n, self.window),
                     dict(self.ctx.spec.constraints)).levels

    def _scoring(self, n: int) -> Scoring:
        """Trial ``n``'s copy's metrics under the names its trial logged them
        (``perf_throughput`` for one entry, ``a/perf_throughput`` for each of several)."""
        assert self.served is not None
        copies, conf = self.served[n], self.ctx.configuration
        return Scoring(list(copies), lambda name, metric: conf.metric_name(copies[name][0], metric))

    def warm(self, say: Callable[[str], None], label: str) -> float:
        """Both copies under load together for about :data:`WARM_S` seconds, unmeasured
        (the first pairs after a load read differently from the rest); the seconds it took.
        Its windows start at once: a block's warm-up requests would only lengthen it. A copy
        that fails here fails its blocks too, and they say why."""
        t0 = time.monotonic()
        window = max(int(1000 * WARM_S / WINDOWS), 1)
        try:
            sweep(self.ctx.bench.server.endpoints,
                  {name: load for n in self.rows
                   for name, load in self._entries(n, window, ramp=False).items()}, {})
        except TrackerError as err:
            say(f"confirm {label}: warming the two copies failed: "
                f"{str(err).splitlines()[0][:200]}")
        else:
            say(f"confirm {label}: the two copies warmed together "
                f"({time.monotonic() - t0:.1f} s)")
        self.warmed = True
        return time.monotonic() - t0

    def pair(self, order: list[int], say: Callable[[str], None], label: str,
             index: int = 0) -> dict[str, Reading]:
        """One pair: a block of each copy in ``order``; each one's reading. Every
        :data:`RELOAD_PAIRS` pairs the two copies are loaded again first (:meth:`reload`)."""
        objectives = dict(self.ctx.spec.objectives)
        metric = next(iter(objectives))
        out: dict[str, Reading] = {}
        if index > 0 and index % RELOAD_PAIRS == 0:
            self.reload(say, label)
        warming = 0.0 if self.warmed else self.warm(say, label)
        for n in order:
            t0 = time.monotonic() - warming  # the first block's seconds count the warm-up's
            warming = 0.0
            try:
                choice = pick_best_level(
                    self.block(n), joint.constraints_of(self.ctx.spec, self.ctx.configuration),
                    objectives, self._scoring(n))
            except TrackerError as err:
                out[str(n)] = {"error": str(err)[:500],
                               "seconds": round(time.monotonic() - t0, 2)}
                say(f"confirm {label}: {self.rows[n].name} failed: "
                    f"{str(err).splitlines()[0][:200]}")
                continue
            got = choice.metrics
            seconds = round(time.monotonic() - t0, 2)
            if metric in RELATIVE:  # scored against the pair's default once both are in
                out[str(n)] = {metric: None, "feasible": choice.feasible, "seconds": seconds,
                               JOINT: {k: v for k, v in got.items() if k not in RELATIVE}}
                continue
            out[str(n)] = {metric: got.get(metric), LATENCY: got.get(LATENCY),
                           "feasible": choice.feasible, "concurrency": choice.concurrency,
                           "seconds": seconds}
        return out

    def reload(self, say: Callable[[str], None], label: str) -> None:
        """Load the two copies again (new instances, new processes): how the machine places
        them can favour one copy for as long as they stay loaded, by 15-20% on a loaded
        2-core machine (docs/validation.md#block-length-does-not-cancel-load), so the pairs sample
        several placements. A copy that does not load again leaves the pair's blocks to fail
        and say why."""
        assert self.workdir is not None
        t0 = time.monotonic()
        try:
            self.setup(self.workdir)
        except TrackerError as err:
            say(f"confirm {label}: loading the two copies again failed: "
                f"{str(err).splitlines()[0][:200]}")
            return
        say(f"confirm {label}: the two copies loaded again ({time.monotonic() - t0:.1f} s)")


def order_of(seed: int, index: int, pair: list[int]) -> list[int]:
    """The order of round ``index`` (reproducible from the confirmation's seed). Two: the
    first round's order is drawn, then the rounds alternate (AB, BA, AB, ...), so that
    whatever favours the first block of a pair (or the second) falls on each side equally and
    widens the interval instead of moving it; a random order per pair left 3-5 pairs in one
    order often enough for A/A confirmations to call a copy of the default better. More than
    two (rounds of ``confirm.top_k``): each round's order drawn anew."""
    got = list(pair)
    if len(got) == 2:
        random.Random(seed * 1000).shuffle(got)
        return got[::-1] if index % 2 else got
    random.Random(seed * 1000 + index).shuffle(got)
    return got


def pair_line(rnd: RoundEntry, base: int, index: int, metric: str) -> str:
    """``confirm pair 3: trial-4 31.2 infer/s, then trial-0 20.1 infer/s  x1.55``; for a score
    against the pair's default (weighted_gain), each entry's throughput and the score:
    ``trial-4 a 31.2 infer/s; b 210 infer/s, then trial-0 ...  weighted_gain +0.118``."""
    results = rnd["results"]
    parts = [f"trial-{n} {_block_text(results[str(n)], metric)}"
             for n in rnd["order"] if results.get(str(n), {}).get(metric) is not None]
    other = next((n for n in rnd["order"] if n != base), base)
    if metric in RELATIVE:
        score = results.get(str(other), {}).get(metric)
        ratio = f"{metric} {score:+.3f}" if isinstance(score, int | float) else ""
    else:
        ratio = ratio_text(results.get(str(other), {}), results.get(str(base), {}), metric)
    return f"confirm pair {index}: {', then '.join(parts)}{'  ' + ratio if ratio else ''}"


def _block_text(reading: Reading, metric: str) -> str:
    """One block in a pair's line: the objective, or each entry's throughput."""
    each = reading.get(JOINT)
    if not isinstance(each, dict):
        return fmt(metric, float(reading.get(metric) or 0.0))
    tail = "/perf_throughput"
    return "; ".join(f"{k[:-len(tail)]} {fmt('perf_throughput', float(v))}"
                     for k, v in each.items() if k.endswith(tail))


def ratio_text(reading: Mapping[str, Any], base: Mapping[str, Any], metric: str) -> str:
    """``x1.42`` for a pair (the best over the default on the first objective), or ""."""
    a, b = reading.get(metric), base.get(metric)
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return ""
    return f"x{a / b:.2f}"

