"""One candidate configuration: what it serves and how it is measured.

- :mod:`~tracker.candidate.values`: a trial's parameters split into config, file and server
  values
- :mod:`~tracker.candidate.measurement`: the configuration written, served and measured
- :mod:`~tracker.candidate.entries`: its entry models, measured and judged together
- :mod:`~tracker.candidate.model_store`: the model files stored once per study
"""
