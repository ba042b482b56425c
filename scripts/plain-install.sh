#!/usr/bin/env bash
# The plain install, as a new user does it: a fresh venv with its bundled pip (not upgraded),
# `pip install -e .` without the lock, then the tests that run a real Triton on that set. Which
# set pip resolves depends on the pip and on what the environment holds: the lock pins
# nvidia-pytriton 0.7.0 with numpy 1, and Python 3.11's bundled pip resolves 0.5.7 with numpy 2,
# whose stub needs the shim's other tensor path. A resolution that breaks measurement fails
# here.
# Called by scripts/test.sh (so by CI); extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv-plain"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
echo "plain install: $("$VENV/bin/python" -m pip --version | cut -d' ' -f1-2) (bundled), no lock..." >&2
"$VENV/bin/python" -m pip install -q --no-compile -e "$ROOT" 2>&1 | grep -v "^WARNING: Location" >&2 || true
"$VENV/bin/python" -m pip check >&2
"$VENV/bin/python" -m pip install -q --no-compile pytest 2>&1 | grep -v "^WARNING: Location" >&2 || true
"$VENV/bin/tracker" --version
cd "$ROOT"
# The real-Triton tests whose outcome depends on the resolved set: the shim's tensor path
# (numpy 1 or 2), the wheel's tritonserver (its version differs per nvidia-pytriton) started,
# reloaded and read, the load generator, tune / profile / a failing stub end to end, and
# deployment with explicit model control. Left to the locked run (the same code on the same
# server, nothing that the resolution changes): the NVIDIA plugin's CLI (187 s here), the
# confirmation (111 s), Ctrl-C handling (64 s), the deployment watcher, the fake-NVML GPU
# study. Docker tests build their image from the locked venv; PostgreSQL tests do not
# depend on it.
exec "$VENV/bin/python" -m pytest -q -m "triton and not docker and not postgres" \
    -p no:cacheprovider --durations=10 \
    tests/triton/test_server_shim.py tests/profile/test_profile.py tests/tuning/test_failure_reasons.py \
    tests/tuning/test_tune_study.py tests/measure/test_loadgen.py tests/triton/test_server_local.py \
    tests/triton/test_server_contract.py tests/deploy/test_triton_target.py tests/triton/test_model_config_triton.py \
    "$@"
