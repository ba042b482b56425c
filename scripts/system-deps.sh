#!/usr/bin/env bash
# Installs Debian's docker.io, postgresql and chromium (the browser test) when missing (as
# root, with apt). The daemons and the browser are started and stopped by the test fixtures
# themselves, so nothing is left running.
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "not root: cannot install ${need[*]}" >&2
    exit 1
fi
echo "installing ${need[*]} (once)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts services on install where it can; the tests run their own instances.
service postgresql stop >/dev/null 2>&1 || true
