"""The confirmation: after the search, the best few configurations and the default measured
again until the evidence decides, and the verdict (better / tied / equivalent / inconclusive).

- :mod:`~tracker.confirm.sequence`: anytime-valid 95% intervals (pure numbers)
- :mod:`~tracker.confirm.stats`: per-configuration intervals, paired improvements, the verdict
- :mod:`~tracker.confirm.record`: the typed record kept in the Optuna study, read back
- :mod:`~tracker.confirm.words`: the verdict in words, MLflow metrics and tags
- :mod:`~tracker.confirm.rounds`: the measuring, on the study's server
- :mod:`~tracker.confirm.command`: ``tracker confirm`` on a finished study

docs/tuning.md explains the rules.
"""
