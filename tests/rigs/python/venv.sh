#!/usr/bin/env bash
# A venv of one interpreter with sco-agent and its test extra, and the .opt-2.pyc the agent runs on
# (-OO, the unit's PYTHONOPTIMIZE=2) for the venv, its standard library and the checkout the rigs
# run, as a node's are compiled at install (deploy/compile-pyc.sh). Made if missing, brought up to
# date if present. Used by tests/run.sh (one per interpreter) and bench/footprint.py --python.
#   tests/rigs/python/venv.sh VENV PYTHON
set -euo pipefail
cd "$(dirname "$0")/../../.."
VENV=$1
PYTHON=$2
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV ($("$PYTHON" -V))"
  "$PYTHON" -m venv "$VENV"
fi
echo "== pip install .[test] ($("$VENV/bin/python" -V))"
"$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/pip" install -q --disable-pip-version-check ".[test]"
deploy/compile-pyc.sh "$VENV/bin/python" 2 common watcher executor verifier spool supervisord_plugins
