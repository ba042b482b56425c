"""The verdict: whether a configuration beats the default, and the words that say so.

The statistics that decide it, and the words, tags and metrics that say so. Pure numbers
and records, measuring nothing.

- :mod:`~tracker.verdict.anytime`: anytime-valid 95% intervals
- :mod:`~tracker.verdict.stats`: per-configuration intervals, paired improvements, the verdict
- :mod:`~tracker.verdict.record`: the typed record kept in the Optuna study, read back
- :mod:`~tracker.verdict.stopping`: when the confirmation stops, read from the record
- :mod:`~tracker.verdict.words`: the verdict in words, MLflow metrics and tags

docs/tuning.md explains the rules.
"""
