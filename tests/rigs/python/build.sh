#!/usr/bin/env bash
# Build (once) CPython 3.13 from Debian 13's `python3.13` source package, for the test command's
# second interpreter (tests/run.sh; README "Tests").
#
# Debian 12 has no python3.13 package, but Debian 13 (trixie) ships its source package. We fetch it
# through deb-src lines derived from this machine's own apt sources with the suite renamed to
# trixie (tests/rigs/deb_src_lines.sh), unpack the upstream release it carries, and build it with
# the machine's own toolchain: configure + make, without profile-guided optimisation or a test run
# (1855 s measured here, niced, on 2 cores busy with other builds and tests). Installed under the
# cache, OUTSIDE the repository, so every later run exits at once.
#
# Usage: build.sh            prints the cached interpreter's path on its last line
# Env:   SCO_CACHE           cache dir (default $HOME/.cache/sco-agent)
#        KEEP_BUILD_DIR=1    keep the temporary source tree (for debugging a failed build)
# Exit:  0 built or cached; 3 the source package cannot be fetched here (callers decide: under CI a
#        missing 3.13 is a failure); anything else is a real build failure.
set -euo pipefail

SERIES=3.13
SUITE=trixie
CACHE_DIR="${SCO_CACHE:-$HOME/.cache/sco-agent}"
PREFIX="$CACHE_DIR/python$SERIES"
BINARY="$PREFIX/bin/python$SERIES"
HERE="$(cd "$(dirname "$0")" && pwd)"
# The toolchain and the libraries of the standard library's C modules (ssl, ctypes, sqlite3, lzma,
# bz2, zlib, readline, curses, dbm, uuid, pyexpat).
PACKAGES=(dpkg-dev make gcc libc6-dev pkg-config libssl-dev zlib1g-dev libbz2-dev liblzma-dev libffi-dev
          libsqlite3-dev libexpat1-dev libreadline-dev libncurses-dev libgdbm-dev uuid-dev)

log() { printf '[python%s build %s] %s\n' "$SERIES" "$(date +%H:%M:%S)" "$*" >&2; }

cached_ok() {
    [[ -x "$BINARY" ]] && "$BINARY" -c 'import ssl, venv, ensurepip, ctypes, sqlite3, lzma, bz2, zlib, decimal' 2>/dev/null
}

if cached_ok; then
    echo "$BINARY"
    exit 0
fi

log "installing build packages (only those missing)"
sh "$HERE/../apt_install.sh" "${PACKAGES[@]}" >&2

WORK="$(mktemp -d "${TMPDIR:-/tmp}/python$SERIES-build.XXXXXX")"
if [[ "${KEEP_BUILD_DIR:-0}" != 1 ]]; then
    trap 'rm -rf "$WORK"' EXIT
else
    log "keeping build dir $WORK"
fi

PRIVATE_LIST="$WORK/apt/sources.list"
mkdir -p "$WORK/apt/lists/partial" "$WORK/src"
bash "$HERE/../deb_src_lines.sh" "$SUITE" >"$PRIVATE_LIST"
if [[ ! -s "$PRIVATE_LIST" ]]; then
    log "no Debian entries in this machine's apt sources: cannot fetch the $SUITE source package"
    exit 3
fi
APT_PRIVATE=(
    -o "Dir::Etc::SourceList=$PRIVATE_LIST"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$WORK/apt/lists"
    # The download happens in our root-only temp dir, which the _apt sandbox user cannot write.
    -o "APT::Sandbox::User=root"
)
log "apt-get update (private source list, $SUITE)"
apt-get "${APT_PRIVATE[@]}" update -q >"$WORK/apt-update.log" 2>&1 || log "update reported errors (see below if source fails)"
log "apt-get source python$SERIES"
# Unpacked without Debian's patches: they fit Debian's packaging, not a prefix of our own (one
# disables ensurepip, which python3-pip-whl replaces there, and a venv needs it here). What is
# built is the upstream release the source package carries.
if ! (cd "$WORK/src" && apt-get "${APT_PRIVATE[@]}" source -q --download-only "python$SERIES" >"$WORK/apt-source.log" 2>&1 \
      && dpkg-source --skip-patches -x ./*.dsc "python$SERIES-tree" >>"$WORK/apt-source.log" 2>&1); then
    cat "$WORK/apt-update.log" "$WORK/apt-source.log" >&2
    log "the python$SERIES source package is not available from this machine's apt sources"
    exit 3
fi
TREE="$WORK/src/python$SERIES-tree"
[[ -n "$TREE" && -f "$TREE/configure" ]] || { log "unpacked tree without configure: $TREE"; exit 1; }
log "source unpacked in $TREE"

log "configure + make (several minutes on 2 cores)"
start=$SECONDS
rm -rf "$PREFIX"   # a half-installed prefix from an interrupted run
(
    cd "$TREE"
    # The system expat, as Debian's own build (debian/rules). Debian 12 has no libmpdec: decimal uses
    # the copy bundled with CPython 3.13 (configure falls back to it).
    ./configure --prefix="$PREFIX" --with-ensurepip=install --with-system-expat \
        >"$WORK/configure.log" 2>&1
    make -j"$(nproc)" >"$WORK/make.log" 2>&1
    make altinstall >"$WORK/install.log" 2>&1
) || { for f in configure make install; do [[ -f "$WORK/$f.log" ]] && { echo "--- $f.log" >&2; tail -n 30 "$WORK/$f.log" >&2; }; done
     rm -rf "$PREFIX"; log "build failed"; exit 1; }
log "built in $((SECONDS - start)) s"
cached_ok || { log "installed interpreter fails its import check"; exit 1; }
log "cached $("$BINARY" -VV | head -n1) at $BINARY"
echo "$BINARY"
