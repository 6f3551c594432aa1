#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run them.
# This is the README's test command, and what .ci/run calls.
#   bash tests/run.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VENV=${SCO_VENV:-$REPO/.venv}

need_apt=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  python3 -m venv "$VENV"
fi
echo "== pip install -e .[test]"
"$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/pip" install -q --disable-pip-version-check ".[test]"
# The agent runs with -OO (the unit's PYTHONOPTIMIZE=2): .opt-2.pyc for the venv, its standard
# library and the checkout the rigs run, as a node's are compiled at install.
deploy/compile-pyc.sh "$VENV/bin/python" 2 common watcher executor verifier spool supervisord_plugins

# Real components the end-to-end tiers use, installed by the project's own scripts.
if [ -x tests/rigs/slurm/install.sh ] || [ -f tests/rigs/slurm/install.sh ]; then
  echo "== Slurm (Debian packages)"
  bash tests/rigs/slurm/install.sh
fi
echo "== referees: promtool, cloud-init, systemd-analyze (Debian packages)"
bash tests/rigs/referees/install.sh
if [ -f tests/rigs/kube_real/build.sh ]; then
  echo "== kube-apiserver v1.20.2 (built once from Debian's source package, then cached)"
  bash tests/rigs/kube_real/build.sh
fi

echo "== ruff"
"$VENV/bin/ruff" check .

# The files to check are in pyproject.toml ([tool.mypy] files); set -e stops the run on an error,
# and tests/repo/test_type_check.py fails if this step is ever taken out.
echo "== mypy"
"$VENV/bin/python" -m mypy

echo "== pytest"
export PATH="$VENV/bin:$PATH"
exec "$VENV/bin/python" -m pytest -q "$@"
