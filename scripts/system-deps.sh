#!/usr/bin/env bash
# Installs Debian's docker.io, postgresql and chromium (the browser test) when missing (as
# root, with apt). The daemons and the browser are started and stopped by the test fixtures
# themselves, so nothing is left running. It says what it installs before it does;
# TRACKER_SKIP_SYSTEM_DEPS=1 skips it (the tests that need these then skip).
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "${TRACKER_SKIP_SYSTEM_DEPS:-0}" = 1 ]; then
    echo "not installing ${need[*]} (TRACKER_SKIP_SYSTEM_DEPS=1)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "not root: cannot install ${need[*]}" >&2
    exit 1
fi
echo "installing the system packages ${need[*]} with apt-get (once, a few minutes;" \
     "set TRACKER_SKIP_SYSTEM_DEPS=1 to skip them)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts services on install where it can; the tests run their own instances.
service postgresql stop >/dev/null 2>&1 || true
