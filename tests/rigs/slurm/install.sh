#!/bin/sh
# Install the Debian packages of the one-node Slurm test rig, only when missing.
set -eu
exec sh "$(dirname "$0")/../apt_install.sh" slurmctld slurmd slurm-client munge
