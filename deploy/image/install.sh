#!/usr/bin/env bash
# Install sco-agent into a node image: what an image build (Packer, mkosi, a Dockerfile for a
# VM image...) runs once, as root, inside the image or against its root directory.
#
#   deploy/image/install.sh [--root DIR] [--python PY] [--wheel FILE] [--trust-key FILE.pub]...
#
#   --root DIR        install into DIR as the image's / (default: /, the running system)
#   --python PY       the interpreter the venv is built from (default: python3). Building inside
#                     the image, that is the image's own python3, which the venv then links to.
#   --wheel FILE      install this sco-agent wheel (default: build it from this checkout with pip wheel)
#   --trust-key FILE  bake a hall's contract-signing public key into the trust directory
#                     (repeatable; usually cloud-init writes keys at launch instead)
#
# What a node gets (tests/referees/test_node_image.py checks each file, mode and owner):
#   <prefix>/                        a venv with sco-agent and its pinned dependencies; <prefix> is
#                                    read from the unit's ExecStart (/opt/sco-agent); .pyc compiled
#                                    for the optimisation level the unit runs with
#   /etc/systemd/system/sco-agent.service              the unit, enabled (multi-user.target.wants)
#   /etc/sco-agent/agent.toml        the default configuration (kept if the image already has one;
#                                    cloud-init writes the hall's at launch)
#   /etc/sco-agent/trust/            the trust directory, root-owned 0755 (only root may add a key)
#   /etc/systemd/logind.conf.d/50-sco-agent.conf       InhibitDelayMaxSec for the kubelet's lock
#   /etc/kubernetes/kubelet.conf.d/50-sco-agent-graceful-shutdown.conf   the kubelet fragment
#   /usr/share/doc/sco-agent/README.md                 the unit's Documentation=
# The state, runtime and log directories are the unit's (StateDirectory= etc.): systemd makes them.
#
# Idempotent: a second run rebuilds the venv and reinstalls the same files.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
UNIT_SRC=$REPO/deploy/systemd/sco-agent.service

ROOT=""
PYTHON=python3
WHEEL=""
TRUST_KEYS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --root) ROOT=${2%/}; shift 2 ;;
        --python) PYTHON=$2; shift 2 ;;
        --wheel) WHEEL=$2; shift 2 ;;
        --trust-key) TRUST_KEYS+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$ROOT" = "/" ] && ROOT=""

say() { printf '[sco-agent image] %s\n' "$*" >&2; }

# Everything the unit names, read from the unit itself so the two never disagree.
unit_value() { sed -n "s/^$1=//p" "$UNIT_SRC" | head -n1; }
EXEC_START=$(unit_value ExecStart)
SUPERVISORD=${EXEC_START%% *}                       # /opt/sco-agent/bin/sco-supervisord
PREFIX=$(dirname "$(dirname "$SUPERVISORD")")       # /opt/sco-agent
CONFIG=$(sed -n 's/^Environment=SCO_AGENT_CONFIG=//p' "$UNIT_SRC")
OPTIMIZE=$(sed -n 's/^Environment=PYTHONOPTIMIZE=//p' "$UNIT_SRC")
OPTIMIZE=${OPTIMIZE:-0}
case "$PREFIX" in /*) ;; *) echo "install.sh: cannot read the prefix from ExecStart=$EXEC_START" >&2; exit 1 ;; esac
[ -n "$CONFIG" ] || { echo "install.sh: the unit sets no SCO_AGENT_CONFIG" >&2; exit 1; }
command -v systemctl >/dev/null || { echo "install.sh: systemctl not found (the image needs systemd)" >&2; exit 1; }

if [ "$(id -u)" = 0 ]; then
    OWN=(-o root -g root)
else
    OWN=()      # a test run as a normal user: same files and modes, owned by that user
    say "not root: files will be owned by $(id -un)"
fi
put() { install "${OWN[@]}" -D -m "$1" "$2" "$ROOT$3"; }       # put MODE SRC DEST
dir() { install "${OWN[@]}" -d -m "$1" "$ROOT$2"; }             # dir MODE DEST

VENV=$ROOT$PREFIX
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

say "venv at $PREFIX (built from $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"
"$PYTHON" -m venv --clear "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -z "$WHEEL" ]; then
    say "building the wheel from $REPO"
    # From a clean copy: setuptools builds in the source tree (build/, *.egg-info), and a stale
    # build/lib would put files since deleted from the checkout into the wheel.
    mkdir "$WORK/src"
    tar -C "$REPO" --exclude=./.git --exclude=./build --exclude=./dist --exclude='./*.egg-info' \
        --exclude=./.venv --exclude=./.run --exclude=__pycache__ -cf - . | tar -C "$WORK/src" -xf -
    "$VENV/bin/python" -m pip wheel -q --no-deps -w "$WORK" "$WORK/src"
    WHEEL=$(ls "$WORK"/sco_agent-*.whl)
fi
# No .pyc from pip: they would name the build root in every traceback; compiled below instead.
"$VENV/bin/python" -m pip install -q --no-compile "$WHEEL"

if [ -n "$ROOT" ]; then
    # A venv bakes its own path into its scripts' #! lines and activate scripts: make them name
    # the path the node will see. (bin/python is a symlink to the base interpreter: unchanged.)
    grep -rlI --null -F "$VENV" "$VENV/bin" "$VENV/pyvenv.cfg" | xargs -0 -r sed -i "s|$VENV|$PREFIX|g"
fi
say "compiling .pyc (optimisation level $OPTIMIZE, as the unit runs, and 0 for sco-agentctl)"
# Both levels: the unit's for the agent, 0 for an operator's shell (sco-agentctl, supervisorctl).
COMPILE=(-q -f -j 0 -o 0 -o "$OPTIMIZE")
[ -n "$ROOT" ] && COMPILE+=(-s "$ROOT" -p /)
"$VENV/bin/python" -m compileall "${COMPILE[@]}" "$VENV/lib" >/dev/null
# The standard library the venv runs on: a distribution ships its .pyc for level 0 only, and
# without the unit's level every start would compile asyncio, tomllib, email... (+20 MiB, research).
# The image's own copy when building into --root with the image's python, else the interpreter's.
STDLIB=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
if [ -n "$ROOT" ] && [ -d "$ROOT$STDLIB" ]; then
    "$VENV/bin/python" -m compileall -q -j 0 -o "$OPTIMIZE" -s "$ROOT" -p / "$ROOT$STDLIB" >/dev/null || true
else
    "$VENV/bin/python" -m compileall -q -j 0 -o "$OPTIMIZE" "$STDLIB" >/dev/null || true
fi

say "unit, configuration, trust directory, drop-ins"
put 0644 "$UNIT_SRC" /etc/systemd/system/sco-agent.service
dir 0755 "$(dirname "$CONFIG")"
if [ -e "$ROOT$CONFIG" ]; then
    say "keeping the image's $CONFIG"
else
    put 0644 "$REPO/deploy/sco-agent.toml" "$CONFIG"
fi
dir 0755 /etc/sco-agent/trust
for key in "${TRUST_KEYS[@]}"; do
    put 0644 "$key" "/etc/sco-agent/trust/$(basename "$key")"
done
put 0644 "$REPO/deploy/systemd/logind.conf.d/sco-agent.conf" /etc/systemd/logind.conf.d/50-sco-agent.conf
dir 0755 /etc/kubernetes/kubelet.conf.d
put 0644 "$REPO/deploy/kubernetes/kubelet-graceful-shutdown.yaml" \
    /etc/kubernetes/kubelet.conf.d/50-sco-agent-graceful-shutdown.conf
put 0644 "$REPO/README.md" /usr/share/doc/sco-agent/README.md

if [ -z "$ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable sco-agent.service
else
    # Offline (an image root, or a build container without systemd as PID 1): the same
    # [Install] symlinks, made by systemctl itself.
    systemctl --root="${ROOT:-/}" enable sco-agent.service
fi
say "done: sco-agent.service enabled; starts at the next boot"
