"""Triton server launchers: one contract (base.py), three modes (local, docker, remote)."""
