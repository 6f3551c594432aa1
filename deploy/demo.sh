#!/usr/bin/env bash
# Install everything on a fresh Debian machine and run the demo: the agent under supervisord,
# against a real nats-server and the metadata / Kubernetes / Vector emulators, with a reclaim
# notice injected and the drain's timeline printed. This is the README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VENV=${SCO_VENV:-$REPO/.venv}
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/pip" install -q --disable-pip-version-check ".[test]"
deploy/compile-pyc.sh "$VENV/bin/python" 2 common watcher executor verifier spool supervisord_plugins
export PATH="$VENV/bin:$PATH"
exec "$VENV/bin/python" -m tests.demo "$@"
