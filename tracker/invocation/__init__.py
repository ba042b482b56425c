"""What one invocation of ``tracker tune``, ``profile`` or ``confirm`` sets up once.

- :mod:`~tracker.invocation.session`: the session (spec, model, MLflow, storage, server,
  signals) and a study's context
- :mod:`~tracker.invocation.progress`: what a study prints while it runs
- :mod:`~tracker.invocation.remembered`: the earlier study a warm start reads from MLflow
"""
