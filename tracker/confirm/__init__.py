"""The confirmation: the best and the default measured again until the verdict.

After the search, the best few configurations and the default are measured again, on the
study's server, until the verdict (:mod:`tracker.verdict`) decides.

- :mod:`~tracker.confirm.paired`: the paired design (best and default side by side)
- :mod:`~tracker.confirm.rounds`: the rounds design, and which design a study gets
- :mod:`~tracker.confirm.command`: ``tracker confirm`` on a finished study

Never imports :mod:`tracker.tuning` (the search loop), nor the search loop this package.
"""
