"""The commands that chain the steps: :mod:`~tracker.workflow.tune` runs the search
(:mod:`tracker.study`), then the confirmation (:mod:`tracker.confirm`), then the conclusion.
The search and the confirmation never import each other; this package joins them."""
