#!/usr/bin/env bash
# Build (once) a real kube-apiserver v1.20.2 for the end-to-end test tier.
#
# No prebuilt kube-apiserver is reachable from this workplace's registries, but Debian bookworm's
# *source* package `kubernetes` (1.20.5+really1.20.2) carries the full upstream tree with vendor/,
# which Debian's golang-1.19 builds offline. The binary is cached OUTSIDE the repo, so every later
# run (and CI on the same machine) exits at once.
#
# Usage: build.sh            prints the cached binary's path on its last line
# Env:   SCO_CACHE           cache dir (default $HOME/.cache/sco-agent)
#        KEEP_BUILD_DIR=1    keep the temporary source tree (for debugging a failed build)
# Exit:  0 built or cached; 3 the source package cannot be fetched here (callers may skip);
#        anything else is a real build failure.
set -euo pipefail

VERSION=v1.20.2
CACHE_DIR="${SCO_CACHE:-$HOME/.cache/sco-agent}"
BINARY="$CACHE_DIR/kube-apiserver-$VERSION"
GO_BIN=/usr/lib/go-1.19/bin
# Runtime and build packages. rsync (+ libpopt0) is used by the kube build scripts to stage output.
PACKAGES=(golang-1.19-go golang-1.19-src rsync libpopt0 etcd-server dpkg-dev make gcc libc6-dev openssl)

log() { printf '[kube-real build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cached_ok() {
    [[ -x "$BINARY" ]] && "$BINARY" --version 2>/dev/null | grep -q "Kubernetes $VERSION"
}

if cached_ok && command -v etcd >/dev/null; then
    echo "$BINARY"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
install_packages() {
    # Try with the lists already on the machine first; refresh them only if that fails.
    if ! apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null; then
        log "installing packages failed with current lists; running apt-get update"
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null
    fi
}
log "installing ${PACKAGES[*]}"
install_packages

if cached_ok; then
    echo "$BINARY"
    exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kube-real-build.XXXXXX")"
if [[ "${KEEP_BUILD_DIR:-0}" != 1 ]]; then
    trap 'rm -rf "$WORK"' EXIT
else
    log "keeping build dir $WORK"
fi

# --- deb-src entries derived from this machine's own apt sources (tests/rigs/deb_src_lines.sh) ---
PRIVATE_LIST="$WORK/apt/sources.list"
mkdir -p "$WORK/apt/lists/partial"
bash "$(dirname "$0")/../deb_src_lines.sh" >"$PRIVATE_LIST"
if [[ ! -s "$PRIVATE_LIST" ]]; then
    log "no Debian entries for this release in this machine's apt sources: cannot fetch the source package"
    exit 3
fi
log "derived $(wc -l <"$PRIVATE_LIST") deb-src entries from the machine's apt sources"

APT_PRIVATE=(
    -o "Dir::Etc::SourceList=$PRIVATE_LIST"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$WORK/apt/lists"
    # The download happens in our root-only temp dir, which the _apt sandbox user cannot write.
    -o "APT::Sandbox::User=root"
)
log "apt-get update (private source list)"
apt-get "${APT_PRIVATE[@]}" update -q >"$WORK/apt-update.log" 2>&1 || log "update reported errors (see below if source fails)"
mkdir -p "$WORK/src"
log "apt-get source kubernetes"
if ! (cd "$WORK/src" && apt-get "${APT_PRIVATE[@]}" source -q kubernetes >"$WORK/apt-source.log" 2>&1); then
    cat "$WORK/apt-update.log" "$WORK/apt-source.log" >&2
    log "the kubernetes source package is not available from this machine's apt sources"
    exit 3
fi
TREE="$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
[[ -n "$TREE" && -d "$TREE/vendor" ]] || { log "unpacked tree without vendor/: $TREE"; exit 1; }
log "source unpacked in $TREE"

# --- build -------------------------------------------------------------------------------------
log "make WHAT=cmd/kube-apiserver (several minutes on 2 cores)"
start=$SECONDS
(
    cd "$TREE"
    export PATH="$GO_BIN:$PATH" GOFLAGS=-mod=vendor GOPROXY=off GO111MODULE=on \
        GOCACHE="$WORK/gocache" KUBE_GIT_VERSION="$VERSION" KUBE_GIT_TREE_STATE=clean
    make WHAT=cmd/kube-apiserver >"$WORK/make.log" 2>&1
) || { tail -n 60 "$WORK/make.log" >&2; log "build failed"; exit 1; }
log "built in $((SECONDS - start)) s"

BUILT="$(find "$TREE/_output" -type f -name kube-apiserver -perm -u+x | head -n1)"
[[ -n "$BUILT" ]] || { log "make succeeded but no kube-apiserver binary under _output"; exit 1; }
mkdir -p "$CACHE_DIR"
# Copy then rename, so a concurrent reader never sees a half-written binary.
cp "$BUILT" "$BINARY.tmp.$$"
mv -f "$BINARY.tmp.$$" "$BINARY"
cached_ok || { log "cached binary does not report $VERSION"; "$BINARY" --version >&2 || true; exit 1; }
log "cached $("$BINARY" --version) at $BINARY"
echo "$BINARY"
