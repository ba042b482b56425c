"""MLflow: parent/child runs, artifacts, the Triton model flavor, registry promotion."""
