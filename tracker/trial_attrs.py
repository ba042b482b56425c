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
    METRICS = "metrics"              # headline metrics at the chosen level
    MEASUREMENTS = "measurements"    # number of levels measured (0 for a duplicate)
    DUPLICATE_OF = "duplicate_of"    # number of the trial whose result was reused
    FAIL_REASON = "fail_reason"      # why a trial with a result failed
    INTERRUPTED = "interrupted"      # True when Ctrl-C / SIGTERM stopped the trial
    RUN_ID = "mlflow_run_id"         # the trial's MLflow child run
    EXACT_PARAMS = "exact_params"    # baseline values that the space cannot express
