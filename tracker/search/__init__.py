"""The search: spec space -> Optuna distributions, objectives, constraints, study creation."""
