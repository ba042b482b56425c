"""Names of the user attributes each Optuna trial carries: the study's own record of a trial.

A bottom-layer module (imports nothing from the package) so that the tuning loop that writes
them (search/, runner) and the readers below it (tracking/ reports, deploy/ promotion) use one
set of names.
"""

from __future__ import annotations


class Attr:
    """Trial user-attribute names."""

    BASELINE = "baseline"            # True on the default configuration's trial
    CONSTRAINTS = "constraints"      # violations, spec order, <= 0 feasible
    FEASIBLE = "feasible"            # all constraints hold at the chosen concurrency
    CONCURRENCY = "concurrency"      # the chosen concurrency level
    METRICS = "metrics"              # old format: headline metrics as one nested dict
    METRIC_KEYS = "metric_keys"      # names of the headline metrics, each its own attribute
    MEASUREMENTS = "measurements"    # number of levels measured (0 for a duplicate)
    DUPLICATE_OF = "duplicate_of"    # number of the trial whose result was reused
    FAIL_REASON = "fail_reason"      # why a trial with a result failed
    INTERRUPTED = "interrupted"      # True when Ctrl-C / SIGTERM stopped the trial
    RUN_ID = "mlflow_run_id"         # the trial's MLflow child run
    EXACT_PARAMS = "exact_params"    # baseline values that the space cannot express

# Each headline metric at the chosen level is a numeric user attribute of its own, named by the
# metric (``perf_throughput``, ``perf_latency_p99``, ...), so optuna-dashboard can show and
# plot it; ``metric_keys`` lists them. Studies of older versions kept one nested ``metrics``.
UNSET = "unset"  # a knob the default config leaves out, as params and reports show it


def metric_attrs(metrics: dict[str, float]) -> dict[str, object]:
    """The user attributes that record ``metrics`` (see :func:`read_metrics`)."""
    return {Attr.METRIC_KEYS: sorted(metrics), **metrics}


def read_metrics(attrs: dict[str, object]) -> dict[str, float]:
    """A trial's headline metrics from its user attributes (either format)."""
    keys = attrs.get(Attr.METRIC_KEYS)
    if isinstance(keys, list):
        return {str(k): float(v) for k in keys
                if isinstance(v := attrs.get(str(k)), int | float)}
    old = attrs.get(Attr.METRICS)
    return {str(k): float(v) for k, v in old.items()} if isinstance(old, dict) else {}


def shown_params(params: dict[str, object], exact: object) -> dict[str, object]:
    """The params as logged and reported: a baseline knob the space only approximates shows
    its real value, ``unset`` when the default config leaves it out (Optuna keeps the
    nearest value of the space, so the sampler can use the trial)."""
    if not isinstance(exact, dict) or not exact:
        return dict(params)
    return {k: ((UNSET if exact[k] is None else exact[k]) if k in exact else v)
            for k, v in params.items()}
