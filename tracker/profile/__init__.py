"""``tracker profile``: one configuration measured over the load sweep, as one run.

:mod:`~tracker.profile.command` logs it as one MLflow run."""
