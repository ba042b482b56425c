# Sourced by the other scripts: make (once) and activate the project's virtual environment.
# Needs only Python >= 3.10 with pip and venv; installs the package with its dev and docs
# extras (the docs extra builds the site: tests/docs), pinned
# by requirements.lock (regenerate it with scripts/lock.sh), so every fresh machine gets the
# same set. A plain `pip install -e .` without the lock works too (docs/install.md#without-the-lock).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    echo "setting up $ROOT/.venv (first run only)..." >&2
    "$PY" -m venv "$ROOT/.venv"
fi
stamp="$ROOT/.venv/.installed-$(cat "$ROOT/pyproject.toml" "$ROOT/requirements.lock" | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
    "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip >&2
    "$ROOT/.venv/bin/python" -m pip install -q -c "$ROOT/requirements.lock" -e "$ROOT[dev,docs]" >&2
    rm -f "$ROOT"/.venv/.installed-*
    touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export VIRTUAL_ENV="$ROOT/.venv"
