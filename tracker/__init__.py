"""Tune Triton Inference Server model configurations with Optuna, tracked in MLflow."""

__version__ = "0.1.0"
