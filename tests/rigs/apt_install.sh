#!/bin/sh
# Install the Debian packages named on the command line, only those missing.
#   sh tests/rigs/apt_install.sh PKG...
#
# Idempotent and fast when already installed (one dpkg-query per package, no apt call).
# Package scripts start no services here (no systemd; policy-rc.d denies starts),
# so installing never disturbs anything: the rigs start their own daemons.
set -eu

PACKAGES="$*"

missing=""
for pkg in $PACKAGES; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing="$missing $pkg"
    fi
done

if [ -z "$missing" ]; then
    exit 0
fi

if [ "$(id -u)" != "0" ]; then
    echo "apt_install.sh: need root to install:$missing" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# An empty or stale package list (fresh container) does not know the packages: update
# first then, and only then, so a machine with fresh lists installs without network lists.
for pkg in $missing; do
    if ! apt-cache show "$pkg" >/dev/null 2>&1; then
        apt-get update
        break
    fi
done

# Wait for the dpkg lock instead of failing when another job is installing in parallel.
# --no-install-recommends keeps it small (Slurm: 8 packages, without it apt pulls ~42).
install() {
    # shellcheck disable=SC2086  # word splitting of the package list is intended
    apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=300 $missing
}
# Lists that know the packages but name versions the mirror dropped fail at download:
# refresh them and try once more.
if ! install; then
    apt-get update
    install
fi
