"""The search: the tuning loop that asks Optuna for trials (:mod:`~tracker.study.loop`) and
one trial (:mod:`~tracker.study.trial`), on top of :mod:`tracker.session`.

Never imports :mod:`tracker.confirm`; :mod:`tracker.workflow` runs the search, then the
confirmation."""
