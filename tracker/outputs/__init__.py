"""The output check: does a configuration compute what the default computes.

See docs/output-check.md.

- :mod:`~tracker.outputs.probes`: probe sets, tolerances and the comparison (requests are sent
  through :mod:`tracker.triton.infer`)
- :mod:`~tracker.outputs.trials`: the check of a study's trials
- :mod:`~tracker.outputs.stored`: the default's answers, stored once with the study
- :mod:`~tracker.outputs.default`: ``tracker check --outputs``, the default asked twice
- :mod:`~tracker.outputs.standalone`: one configuration checked outside a study's trials
  (``tracker profile``, the confirmation)

The deploy's check of a new version (:mod:`tracker.deploy.verify`) asks the same probes.
"""
