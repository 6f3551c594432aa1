"""deploy/cloud-init/user-data.yaml: valid cloud-config (cloud-init's own schema), and the files its
write_files produce -- rendered by cloud-init's own code into a temporary root -- are exactly the
files the agent reads, and the agent's real loaders accept them.

The one placeholder, NODE_RELAY_CREDS_BASE64, is filled as deploy/nats/README.md tells the launcher
to: the node's .creds, signed by the hall's "node" key, base64-encoded.
"""
from __future__ import annotations

import base64
import io
import json
import os
import stat

from common.config import load
from common.log import Logger
from tests.referees.nats_hall import Hall
from tests.referees.tools import cloud_init_python, referee, run
from tests.support.agent_rig import REPO
from watcher.contract_keeper import ContractKeeper
from watcher.nats_creds import read_creds

USER_DATA = os.path.join(REPO, "deploy", "cloud-init", "user-data.yaml")
RENDER = os.path.join(REPO, "tests", "referees", "cloud_init_render.py")
PLACEHOLDER = "NODE_RELAY_CREDS_BASE64"
# What the agent reads from /etc/sco-agent (common/config.py defaults and the user-data's own config).
EXPECTED = {"/etc/sco-agent/agent.toml": 0o644, "/etc/sco-agent/relay.creds": 0o600,
            "/etc/sco-agent/trust/sco-example-2026.pub": 0o644, "/etc/sco-agent/contract-launch.json": 0o644}


def test_user_data_passes_cloud_init_schema():
    res = run([referee("cloud-init"), "schema", "--config-file", USER_DATA])
    assert res.returncode == 0 and "Valid cloud-config" in res.stdout, res.stdout + res.stderr


def test_cloud_init_schema_does_referee(tmp_path):
    bad = tmp_path / "bad.yaml"
    with open(USER_DATA, encoding="utf-8") as f:
        bad.write_text(f.read().replace("encoding: b64", "encoding: b65"))
    res = run([referee("cloud-init"), "schema", "--config-file", str(bad)])
    assert res.returncode != 0 and "write_files.1.encoding: 'b65' is not one of" in res.stdout + res.stderr


def filled_user_data(tmp_path, node: str, hall: str) -> tuple[str, Hall]:
    """The user-data with the node's relay credential put in, as the launcher would."""
    nats = Hall(str(tmp_path / "nats"))
    creds = nats.creds("node", node.replace(".", "_"), hall)
    with open(creds, "rb") as f:
        encoded = base64.b64encode(f.read()).decode()
    with open(USER_DATA, encoding="utf-8") as f:
        text = f.read()
    assert text.count(PLACEHOLDER) == 2, "the placeholder: once in the header comment, once in write_files"
    path = tmp_path / "user-data.yaml"
    path.write_text(text.replace(f"content: {PLACEHOLDER}", f"content: {encoded}"))
    return str(path), nats


def render(user_data: str, root: str) -> list[dict]:
    res = run([cloud_init_python(), RENDER, user_data, root], env={"PATH": os.environ.get("PATH", "")})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_write_files_are_what_the_agent_reads_and_its_loaders_accept_them(tmp_path):
    node = os.uname().nodename.split(".")[0]       # node.name is left empty: the agent uses the short host name
    user_data, nats = filled_user_data(tmp_path, node, "example-hall-1")
    res = run([referee("cloud-init"), "schema", "--config-file", user_data])
    assert res.returncode == 0, res.stdout + res.stderr
    root = str(tmp_path / "root")
    written = render(user_data, root)

    assert {w["path"]: w["owner"] for w in written} == dict.fromkeys(EXPECTED, "root:root")
    assert not any(w["defer"] for w in written)
    for path, mode in EXPECTED.items():
        st = os.stat(root + path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, path

    # The agent's own configuration loader, on the file as written.
    config = load(root + "/etc/sco-agent/agent.toml")
    assert (config.node.hall, config.node.name) == ("example-hall-1", node)
    c = config.contract
    # It names the files write_files wrote (by its defaults or its own keys).
    assert (c.trust_dir, c.launch_path, config.relay.credentials_file) == (
        "/etc/sco-agent/trust", "/etc/sco-agent/contract-launch.json", "/etc/sco-agent/relay.creds")

    # The watcher's contract loader (trust directory, launch subset, signature), re-rooted.
    rooted = load(root + "/etc/sco-agent/agent.toml", overrides={
        "contract": {"trust_dir": root + c.trust_dir, "launch_path": root + c.launch_path},
        "paths": {"state_dir": str(tmp_path / "state"), "runtime_dir": str(tmp_path / "run")}})
    events: list[tuple] = []
    log = io.StringIO()
    contract = ContractKeeper(rooted, Logger("watcher", stream=log), lambda *a, **k: events.append((a, k))).load()
    assert (contract.source, contract.serial, contract.hall) == ("launch", 41, "example-hall-1")
    assert contract.drain.budget_s == 100
    assert [a[0] for a, _k in events] == ["contract.accepted"], log.getvalue()

    # The relay credential the watcher will use: readable by its loader, and for this node and hall.
    user_jwt, _seed = read_creds(root + config.relay.credentials_file)
    claims = json.loads(base64.urlsafe_b64decode(user_jwt.split(".")[1] + "=="))
    assert claims["name"] == node.replace(".", "_") and claims["nats"]["tags"] == ["hall:example-hall-1"]
    assert claims["iss"] == nats.signing["node"].public


def test_the_renderer_decodes_gzip_and_keeps_modes(tmp_path):
    """The renderer is cloud-init's code: a gzip+b64 entry comes out decoded, its mode applied."""
    import gzip

    blob = base64.b64encode(gzip.compress(b"hello\n")).decode()
    ud = tmp_path / "ud.yaml"
    ud.write_text("#cloud-config\nwrite_files:\n"
                  f"  - path: /x/y.txt\n    permissions: '0640'\n    encoding: gz+b64\n    content: {blob}\n")
    written = render(str(ud), str(tmp_path / "r"))
    assert written[0]["owner"] == "root:root"           # the distro default owner cloud-init applies
    assert (tmp_path / "r/x/y.txt").read_bytes() == b"hello\n"
    assert stat.S_IMODE(os.stat(tmp_path / "r/x/y.txt").st_mode) == 0o640
