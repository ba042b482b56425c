"""Model Analyzer's and Perf Analyzer's commands and files, run unchanged, tracked in MLflow.

:mod:`~tracker.peers.ma_options` reads Model Analyzer's ``profile`` options (command line and
``-f`` YAML) and refuses, by name, every one the tracker does not honour;
:mod:`~tracker.peers.ma_translate` turns them into study specs;
:mod:`~tracker.peers.model_analyzer` runs those studies (``tracker model-analyzer profile``,
``report``); :mod:`~tracker.peers.ma_outputs` writes Model Analyzer's output model
repository, results CSVs and reports from the studies' runs.
:mod:`~tracker.peers.pa_flags` reads Perf Analyzer's flags, and
:mod:`~tracker.peers.perf_analyzer` measures with them (``tracker perf-analyzer``).
:mod:`~tracker.peers.peer_help` prints both peers' usage, each flag or option marked with what
the tracker does with it (``-h``, ``--help``, ``-?``).
"""
