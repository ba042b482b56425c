#!/usr/bin/env bash
# The whole test suite on a fresh machine: sets up the venv, installs the system services the
# tests use (Docker engine, PostgreSQL, Chromium) where this user may, then runs pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not docker"`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$ROOT/scripts/system-deps.sh" || echo "note: system services not installed; docker/postgres/browser tests will skip" >&2
cd "$ROOT"
exec python -m pytest "$@"
