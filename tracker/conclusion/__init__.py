"""The end of a study: the report, the best trial and the parent run's summary.

:mod:`~tracker.conclusion.finish` writes them at the search's and the confirmation's end."""
