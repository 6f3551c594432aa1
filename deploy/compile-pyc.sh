#!/usr/bin/env bash
# .pyc for a venv the agent runs from with -OO (the unit's PYTHONOPTIMIZE=2), as
# deploy/image/install.sh compiles a node's: levels 0 and LEVEL for the venv's packages and for
# DIRs (a checkout the test rigs run through PYTHONPATH), LEVEL for the standard library the venv
# runs on (a distribution ships level 0 only). Without them every start compiles (+20 MiB).
#   deploy/compile-pyc.sh VENV_PYTHON LEVEL [DIR...]
# Used by tests/run.sh and deploy/demo.sh after their pip install, and by bench.footprint.
set -euo pipefail
PY=$1
LEVEL=$2
shift 2
read -r PURELIB STDLIB < <("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"), sysconfig.get_path("stdlib"))')
"$PY" -m compileall -q -j 0 -o 0 -o "$LEVEL" "$PURELIB" "$@" >/dev/null
# The standard library holds files that do not compile on purpose (lib2to3's test data): not ours.
# Their SyntaxWarnings (lib2to3's test grammar) are not ours either.
"$PY" -W ignore::SyntaxWarning -m compileall -q -j 0 -o "$LEVEL" "$STDLIB" >/dev/null || true
