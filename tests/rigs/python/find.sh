#!/usr/bin/env bash
# Print the path of a CPython of one series (3.12, 3.13...) usable for the tests: one that has ssl,
# venv and ensurepip. Found, never assumed: on PATH (python3.13), in /usr/bin and /usr/local/bin,
# through pyenv if the machine has it, then in the cache tests/rigs/python/build.sh fills.
#   find.sh SERIES            exit 1 (nothing printed) if none is there
#   find.sh SERIES --install  3.13 only, when none is found: Debian's python3.13 packages if this
#                             machine's apt has them, else built once from Debian 13's source package
#                             (tests/rigs/python/build.sh; exit 3 if it cannot be fetched here)
set -euo pipefail
SERIES="$1"
INSTALL="${2:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE_DIR="${SCO_CACHE:-$HOME/.cache/sco-agent}"

usable() {  # the interpreter runs, is of the series, and can make a venv with pip
    [[ -n "$1" && -x "$1" ]] || return 1
    "$1" -c "import sys, ssl, venv, ensurepip; sys.exit(sys.version_info[:2] != tuple(map(int, '$SERIES'.split('.'))))" \
        >/dev/null 2>&1
}

candidates() {
    command -v "python$SERIES" || true
    echo "/usr/bin/python$SERIES"
    echo "/usr/local/bin/python$SERIES"
    if command -v pyenv >/dev/null 2>&1; then
        local prefix
        prefix="$(pyenv prefix "$SERIES" 2>/dev/null || true)"
        [[ -n "$prefix" ]] || prefix="$(pyenv root)/versions/$(pyenv versions --bare 2>/dev/null | grep -E "^${SERIES//./\\.}\.[0-9]+$" | sort -V | tail -n1)"
        echo "$prefix/bin/python$SERIES"
    fi
    echo "$CACHE_DIR/python$SERIES/bin/python$SERIES"
}

while read -r candidate; do
    if usable "$candidate"; then
        echo "$candidate"
        exit 0
    fi
done < <(candidates)

[[ "$INSTALL" == --install && "$SERIES" == 3.13 ]] || exit 1
if apt-cache show "python$SERIES-venv" >/dev/null 2>&1; then
    sh "$HERE/../apt_install.sh" "python$SERIES" "python$SERIES-venv" >&2
    usable "/usr/bin/python$SERIES" && { echo "/usr/bin/python$SERIES"; exit 0; }
fi
bash "$HERE/build.sh" | tail -n1
