"""Deployment: the `triton` MLflow deployments target and the registry watcher."""
