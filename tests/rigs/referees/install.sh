#!/bin/sh
# Install the Debian packages whose tools referee what we ship (tests/referees), only when missing:
#   promtool         prometheus   the textfile (`promtool check metrics`), the dashboard's PromQL (`check rules`)
#   cloud-init       cloud-init   deploy/cloud-init/user-data.yaml (`cloud-init schema --config-file`)
#   systemd-analyze  systemd      deploy/systemd/ (`systemd-analyze verify`)
# The prometheus server that package brings is never started (no systemd as PID 1 in a container,
# policy-rc.d denies starts): only its promtool is used.
set -eu
exec sh "$(dirname "$0")/../apt_install.sh" prometheus cloud-init systemd
