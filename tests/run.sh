#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run them.
# This is the README's test command, and what .ci/run calls.
#   bash tests/run.sh [pytest args...]
# The whole suite runs on the machine's python3 (Debian 12's: CPython 3.11) and, beside it, the unit
# tiers and the whole-agent e2e tier (OTHER_TIERS; or the pytest args given) on each other CPython series
# of SCO_TEST_PYTHONS (default "3.12 3.13"; empty: none), each in a venv of its own
# (.venv-SERIES). 3.12 runs where the machine has one; 3.13 is found, or installed from Debian's
# packages, or built once from Debian 13's source package and cached (tests/rigs/python/find.sh):
# under CI (CI=true) a 3.13 that cannot be had fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VENV=${SCO_VENV:-$REPO/.venv}
OTHER_PYTHONS=${SCO_TEST_PYTHONS-3.12 3.13}
OTHER_TIERS=(tests/common tests/watcher tests/executor tests/verifier tests/spool tests/agentctl
             tests/supervisord_plugins tests/sco_checkpoint tests/repo/test_import_sets.py
             tests/repo/test_optimized_safe.py tests/repo/test_tested_pythons.py
             tests/referees/test_node_image.py tests/e2e)
# A venv per interpreter with the package, its test extra and the .opt-2.pyc the agent runs on
# (tests/rigs/python/venv.sh).
make_venv() { bash tests/rigs/python/venv.sh "$1" "$2"; }

need_apt=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

make_venv "$VENV" python3

# The other interpreters, found or installed now (a 3.13 build takes minutes), run beside the first.
others=()
for series in $OTHER_PYTHONS; do
  install=""
  [ "$series" = 3.13 ] && install=--install
  found_rc=0
  python=$(bash tests/rigs/python/find.sh "$series" $install) || found_rc=$?
  if [ "$found_rc" != 0 ] || [ -z "$python" ]; then
    if [ "$series" = 3.13 ] && [ "${CI:-}" = true ]; then
      echo "== CPython 3.13 could not be found, installed or built here (find.sh exit $found_rc): under CI that fails the run" >&2
      exit 1
    fi
    echo "== no CPython $series on this machine: its tiers are not run"
    continue
  fi
  make_venv "$REPO/.venv-$series" "$python"
  others+=("$series")
done

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

# The other interpreters' tiers run beside the whole suite, each in a pytest of its own: most of
# the suite waits on real time (notice windows, outages, restarts), so three sessions side by side
# take about as long as one, where one after another tripled the run. Each has its own temp root
# (short: AF_UNIX names stop at 107 bytes) and log, printed whole when it ends; every test already
# passes with a CPU-heavy job beside it, and the rigs use their own directories and free ports.
rc=0
side=$(mktemp -d "${TMPDIR:-/tmp}/sco-py.XXXXXX")
declare -A side_pid=()
for series in "${others[@]}"; do
  args=("$@")
  [ ${#args[@]} -gt 0 ] || args=("${OTHER_TIERS[@]}")
  echo "== pytest ($("$REPO/.venv-$series/bin/python" -V): ${args[*]}), beside the whole suite"
  mkdir -p "$side/$series"
  (
    start=$SECONDS
    series_rc=0
    PATH="$REPO/.venv-$series/bin:$PATH" "$REPO/.venv-$series/bin/python" -m pytest -q -p no:cacheprovider \
      --basetemp "$side/$series/t" "${args[@]}" > "$side/$series/log" 2>&1 || series_rc=$?
    echo "$series_rc $((SECONDS - start))" > "$side/$series/rc"
  ) &
  side_pid[$series]=$!
done

echo "== pytest ($("$VENV/bin/python" -V): the whole suite)"
start=$SECONDS
PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pytest -q "$@" || rc=$?
echo "== $("$VENV/bin/python" -V): exit $rc in $((SECONDS - start)) s"
for series in "${others[@]}"; do
  wait "${side_pid[$series]}" || true
  read -r series_rc took < "$side/$series/rc" || { series_rc=1; took="?"; }
  echo "== pytest ($("$REPO/.venv-$series/bin/python" -V)), its output:"
  cat "$side/$series/log"
  echo "== $("$REPO/.venv-$series/bin/python" -V): exit $series_rc in $took s"
  [ "$series_rc" = 0 ] || rc=$series_rc
done
rm -rf "$side"
exit "$rc"
