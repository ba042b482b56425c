"""The end of a study invocation: :mod:`~tracker.conclusion.finish` writes the report, the
best trial and the summary on the parent run (the search's and the confirmation's end)."""
