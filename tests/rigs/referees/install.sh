#!/bin/sh
# Install the Debian packages whose tools referee what we ship (tests/referees), only when missing:
#   promtool         prometheus   the textfile (`promtool check metrics`), the dashboard's PromQL (`check rules`)
#   cloud-init       cloud-init   deploy/cloud-init/user-data.yaml (`cloud-init schema --config-file`)
#   systemd-analyze  systemd      deploy/systemd/ (`systemd-analyze verify`)
# Debian ships promtool only inside the prometheus package, whose server we never want running.
# In a container (no systemd as PID 1, policy-rc.d) the package cannot start it; on a machine with
# systemd it would, so when this script is what installed it, it stops and disables it again.
set -eu
had_prometheus=$(dpkg-query -W -f='${db:Status-Status}' prometheus 2>/dev/null || true)
sh "$(dirname "$0")/../apt_install.sh" prometheus cloud-init systemd
if [ "$had_prometheus" != "installed" ] && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service || true
fi
