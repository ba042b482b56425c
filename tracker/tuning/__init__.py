"""``tracker tune``: the loop over trials, one trial, then the confirmation.

Its modules: the loop that asks the Optuna study (:mod:`tracker.search`) for trials
(:mod:`~tracker.tuning.loop`), one trial (:mod:`~tracker.tuning.trial`), the checks before
anything is measured (:mod:`~tracker.tuning.preflight`), and :func:`~tracker.tuning.tune.tune`,
the search followed by the confirmation (:mod:`tracker.confirm`)."""
