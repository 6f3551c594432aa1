"""The unit and the drop-ins the fallback relies on, checked by systemd's own tools in a node image root.

- deploy/systemd/sco-agent.service: `systemd-analyze verify --root=<image>`, where the image is the
  one deploy/image/install.sh built (tests/referees/node_image.py), so the ExecStart binary it
  checks is the supervisord the script really installed.
- deploy/systemd/logind.conf.d/sco-agent.conf: not a unit, so `verify` does not read it. What can
  be checked is: logind reads it (`systemd-analyze cat-config --root` lists it among logind's
  drop-ins), its key is one logind's own parser knows (the Login.* table compiled into the
  systemd-logind this systemd ships), and its value parses as a systemd time span.
- deploy/kubernetes/kubelet-graceful-shutdown.yaml: a KubeletConfiguration fragment, not a systemd
  unit (no kubelet runs here): parsed as YAML, checked against the kubelet's own rules
  (apiVersion/kind on every drop-in, critical <= total) and against the values docs/kubernetes.md
  states and the built-in contract.
"""
from __future__ import annotations

import json
import os
import re

from common.contract import BUILTIN
from tests.referees.node_image import system_unit_dir
from tests.referees.tools import cloud_init_python, referee, run
from tests.support.agent_rig import REPO

LOGIND_DROPIN = "/etc/systemd/logind.conf.d/50-sco-agent.conf"
KUBELET_FRAGMENT = os.path.join(REPO, "deploy", "kubernetes", "kubelet-graceful-shutdown.yaml")
DOCS = os.path.join(REPO, "docs", "kubernetes.md")


def verify(root: str, unit: str) -> tuple[int, str]:
    res = run([referee("systemd-analyze"), "verify", f"--root={root}", "--man=no", unit])
    return res.returncode, (res.stdout + res.stderr).strip()


def test_the_installed_unit_passes_systemd_analyze_verify(node_image):
    assert verify(node_image, "sco-agent.service") == (0, "")


def unit_settings(path: str) -> dict[str, list[str]]:
    """Key -> every value it is given in the [Service] section (systemd's last-one-wins aside)."""
    out: dict[str, list[str]] = {}
    section = ""
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                out.setdefault(key, []).append(value)
    return out


def test_the_unit_keeps_drain_state_where_a_restart_leaves_it(node_image):
    """systemd.exec(5): RuntimeDirectory= is under /run and removed when the unit stops (kept across
    Restart= only with RuntimeDirectoryPreserve=restart), StateDirectory= is under /var/lib and never
    removed. The agent's defaults must put its runtime dir and supervisord's directory in the
    former and its state dir -- where notice.json and executor.json live
    (tests/hostile/test_stack_hostile.py) -- in the latter."""
    from common.config import build

    unit = unit_settings(node_image + "/etc/systemd/system/sco-agent.service")
    runtime = ["/run/" + d for d in unit["RuntimeDirectory"][-1].split()]
    state = ["/var/lib/" + d for d in unit["StateDirectory"][-1].split()]
    env = dict(e.split("=", 1) for e in unit["Environment"])
    paths = build({}).paths
    assert paths.runtime_dir in runtime and env["SCO_AGENT_RUN_DIR"] in runtime
    assert paths.state_dir in state
    assert unit["RuntimeDirectoryPreserve"] == ["restart"]
    # What the chaos harness's unit restart plays (tests/chaos/inject.py): the whole group SIGTERMed.
    assert unit["KillMode"] == ["control-group"] and unit["KillSignal"] == ["SIGTERM"]
    assert unit["Restart"] == ["always"]


def test_verify_does_referee_the_unit(node_image):
    """The same check fails on an unknown directive and on an ExecStart the image does not have."""
    unit_dir = node_image + "/etc/systemd/system"
    with open(unit_dir + "/sco-agent.service") as f:
        text = f.read()
    broken = unit_dir + "/sco-agent-broken.service"
    try:
        with open(broken, "w") as f:
            f.write(text.replace("Nice=-5", "Nice=-5\nFrobnicate=yes")
                    .replace("/opt/sco-agent/bin/sco-supervisord", "/opt/sco-agent/bin/no-such-supervisord"))
        rc, out = verify(node_image, "sco-agent-broken.service")
    finally:
        os.unlink(broken)
    assert rc != 0
    assert "Unknown key name 'Frobnicate'" in out or "Unknown key 'Frobnicate'" in out
    assert "no-such-supervisord is not executable" in out


def logind_binary() -> str:
    """systemd-logind, as this systemd's own systemd-logind.service starts it."""
    with open(os.path.join(system_unit_dir(), "systemd-logind.service")) as f:
        exec_start = next(line for line in f if line.startswith("ExecStart="))
    return exec_start.split("=", 1)[1].split()[0].lstrip("!@-+:")


def logind_dropin() -> dict[str, str]:
    with open(os.path.join(REPO, "deploy", "systemd", "logind.conf.d", "sco-agent.conf")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert lines[0] == "[Login]"
    return dict(line.split("=", 1) for line in lines[1:])


def timespan_seconds(value: str) -> float:
    res = run([referee("systemd-analyze"), "timespan", value])
    assert res.returncode == 0, res.stderr
    return int(re.search(r"μs: (\d+)", res.stdout).group(1)) / 1e6


def test_logind_reads_the_drop_in_and_knows_its_key(node_image):
    res = run([referee("systemd-analyze"), "cat-config", f"--root={node_image}", "systemd/logind.conf"])
    assert f"# {node_image}{LOGIND_DROPIN}" in res.stdout, res.stdout
    settings = logind_dropin()
    assert list(settings) == ["InhibitDelayMaxSec"]
    with open(logind_binary(), "rb") as f:
        parser_table = f.read()
    for key in settings:
        assert f"Login.{key}".encode() in parser_table, f"logind has no setting {key}"
    assert timespan_seconds(settings["InhibitDelayMaxSec"]) == 15


def go_duration_seconds(value: str) -> float:
    """A Go time.Duration string, as the kubelet's metav1.Duration parses it (units h, m, s, ms)."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"not a Go duration: {value!r}"
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)


def kubelet_fragment() -> dict:
    """Parsed by a real YAML parser: PyYAML, from cloud-init's interpreter (the agent has none)."""
    code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"
    res = run([cloud_init_python(), "-c", code, KUBELET_FRAGMENT])
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_kubelet_fragment_is_a_kubelet_configuration_matching_docs_and_contract():
    doc = kubelet_fragment()
    assert (doc.pop("apiVersion"), doc.pop("kind")) == ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
    assert set(doc) == {"shutdownGracePeriod", "shutdownGracePeriodCriticalPods"}
    grace = go_duration_seconds(doc["shutdownGracePeriod"])
    critical = go_duration_seconds(doc["shutdownGracePeriodCriticalPods"])
    assert 0 < critical < grace                      # kubelet validation: critical must not exceed total
    drain = BUILTIN.drain
    assert grace == drain.evict_s
    # The fallback fires lead_s (+ a margin) before the deadline, no earlier: that lead is exactly
    # the kubelet's grace period, and logind must let the kubelet hold the poweroff that long.
    assert grace == BUILTIN.fallback.lead_s
    inhibit = timespan_seconds(logind_dropin()["InhibitDelayMaxSec"])
    assert grace <= inhibit <= drain.evict_s + drain.margin_s
    assert BUILTIN.fallback.lead_s <= inhibit
    with open(DOCS, encoding="utf-8") as f:
        docs = f.read()
    for key, value in (("shutdownGracePeriod", doc["shutdownGracePeriod"]),
                       ("shutdownGracePeriodCriticalPods", doc["shutdownGracePeriodCriticalPods"]),
                       ("InhibitDelayMaxSec", logind_dropin()["InhibitDelayMaxSec"])):
        assert re.search(rf"\| `{key}` \| `{re.escape(value)}` \|", docs), f"docs/kubernetes.md must state {key} = {value}"

