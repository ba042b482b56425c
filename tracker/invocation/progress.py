"""What a study prints while it runs: one line per finished trial, and a progress bar.

The line (stdout) says the trial number, its parameters, throughput (a capacity study: the
capacity, replicas and cost), p99 latency, whether it meets the constraints, and the best
trial so far. The bar (stderr, only on a terminal) counts
complete trials against ``n_trials`` and shows the level being measured.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tqdm import tqdm


def _value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric == "perf_throughput":
        return f"{value:,.1f} infer/s"
    if metric.startswith("perf_"):
        return f"{value:,.2f} ms"
    return f"{value:,.4g}"


def _figures(metrics: Mapping[str, float]) -> str:
    """Throughput and p99; several entry models: ``weighted_gain`` and each model's."""
    def two(prefix: str) -> str:
        return (f"{_value('perf_throughput', metrics.get(prefix + 'perf_throughput'))}  "
                f"p99 {_value('perf_latency_p99', metrics.get(prefix + 'perf_latency_p99'))}")

    if "perf_capacity" in metrics:  # the capacity search's trial (search/capacity.py)
        text = (f"capacity {metrics['perf_capacity']:,.1f} req/s  "
                f"p99 {_value('perf_latency_p99', metrics.get('perf_latency_p99'))}")
        if "replicas" in metrics:
            text += f"  {metrics['replicas']:.0f} replicas"
        if "cost_per_million" in metrics:
            text += f"  {metrics['cost_per_million']:,.4g} per million"
        return text
    if "weighted_gain" not in metrics:
        return two("")
    models = [k.removesuffix("/perf_throughput") for k in metrics
              if k.endswith("/perf_throughput") and not k.startswith("model/")]
    return f"weighted_gain {metrics['weighted_gain']:+.3f}  " + "; ".join(
        f"{m}: {two(m + '/')}" for m in models)


def _params(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


class Progress:
    """Progress output for one invocation of a study."""

    def __init__(self, n_trials: int, done: int, *, out: TextIO | None = None,
                 bar: bool | None = None) -> None:
        self.out = out or sys.stdout
        show = sys.stderr.isatty() if bar is None else bar
        self._bar = tqdm(total=n_trials, initial=min(done, n_trials), unit="trial",
                         desc="study", file=sys.stderr, disable=not show, leave=False,
                         dynamic_ncols=True)

    def line(self, text: str) -> None:
        """A line that stays (printed above the bar)."""
        if self._bar.disable:
            print(text, file=self.out, flush=True)
        else:
            self._bar.write(text, file=self.out)

    def measuring(self, number: int, what: str) -> None:
        self._bar.set_postfix_str(f"trial {number}: {what}", refresh=True)

    def trial(self, number: int, params: Mapping[str, Any], *, state: str,
              metrics: Mapping[str, float], feasible: bool | None, best: str,
              note: str = "", complete: int | None = None) -> None:
        """The line for one finished trial; advances the bar to ``complete`` trials."""
        if state == "COMPLETE":
            what = f"{_figures(metrics)}  {'feasible' if feasible else 'infeasible'}"
        else:
            what = state
        text = f"trial {number:>3}  {_params(params)}  {what}  best: {best}"
        if note:
            text += f"  ({note})"
        self.line(text)
        if complete is not None:
            self._bar.n = min(complete, self._bar.total or complete)
            self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
