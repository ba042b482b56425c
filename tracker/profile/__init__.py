"""``tracker profile`` (:mod:`~tracker.profile.command`): one configuration measured over the
spec's load sweep, as one MLflow run."""
