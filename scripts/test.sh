#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets up the venv (pinned by requirements.lock),
# installs the system services the tests use (Docker engine, PostgreSQL, Chromium) where this
# user may, saying so first (TRACKER_SKIP_SYSTEM_DEPS=1 skips that, and the tests that need
# them skip), runs pytest, then the plain-install leg (scripts/plain-install.sh: a fresh venv,
# bundled pip, no lock, the real-Triton tests on what that resolves).
# Extra arguments go to pytest and skip the plain leg, e.g. `bash scripts/test.sh -m "not docker"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$ROOT/scripts/system-deps.sh" || echo "note: system services not installed; docker/postgres/browser tests will skip" >&2
cd "$ROOT"
if [ $# -gt 0 ]; then
    exec python -m pytest "$@"
fi
echo "== set-up done at ${SECONDS} s" >&2
# two workers (pytest-xdist), a test file to one worker (tests/conftest.py): most of a test's
# time is a server starting or a measurement window, not the CPU; the slowest tests listed,
# to keep the suite inside CI's budget
python -m pytest -n 2 --durations=15
echo "== pytest done at ${SECONDS} s; plain install leg (scripts/plain-install.sh)" >&2
bash "$ROOT/scripts/plain-install.sh"
echo "== plain install leg done at ${SECONDS} s" >&2
