"""The whole agent against real and emulated peers, for end-to-end tests, the demo and benches.

    with Stack(tmp_path) as s:
        s.publish_notice(deadline_in=60)
        s.wait_event("drain.cordoned")

Starts, in this order, and stops in reverse: a real nats-server, the metadata
emulator, the Kubernetes API-server emulator (with this node and another
one), optionally the Vector emulator, then supervisord with the four
processes. Everything is stopped by PID.
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack
from typing import Any, Self

import ujson

from common.timefmt import format_rfc3339
from tests.emulators.kube_fixture import kube_emulator
from tests.emulators.metadata_fixture import metadata_process
from tests.support.agent_rig import AgentRig
from tests.support.nats_rig import NatsServer
from tests.support.notices import relay_payload
from tests.support.wait import wait_for

NODE = "node-a"
OTHER_NODE = "node-b"
HALL = "h1"


class Stack:
    def __init__(self, base: str, *, provider: str = "aws", scheduler: str = "kubernetes",
                 vector: bool = False, poll_interval_s: float = 0.5, contract: dict[str, Any] | None = None,
                 settings: dict[str, dict[str, Any]] | None = None,
                 contract_extra: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> None:
        self.base = str(base)
        self.provider = provider
        self.scheduler = scheduler
        self.with_vector = vector
        self.poll_interval_s = poll_interval_s
        self.extra = settings or {}
        self.contract = contract
        self.contract_extra = contract_extra or {}   # more top-level contract sections (e.g. "slurm")
        self.env = env or {}                          # more for the agent's environment (AgentRig.extra_env)
        self._exit = ExitStack()
        self.nats: NatsServer | None = None
        self.meta: Any = None
        self.kube: Any = None
        self.vector: Any = None
        self.agent: AgentRig | None = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()

    def start(self) -> None:
        os.makedirs(self.base, exist_ok=True)
        self.nats = NatsServer(os.path.join(self.base, "nats.log")).start()
        self._exit.callback(self.nats.stop)
        self.meta = self._exit.enter_context(metadata_process(os.path.join(self.base, "meta"),
                                                              providers=(self.provider,)))
        self.kube = self._exit.enter_context(kube_emulator(os.path.join(self.base, "kube")))
        self.kube.add_node(NODE)
        self.kube.add_node(OTHER_NODE)
        if self.with_vector:
            from tests.emulators.vector_fixture import vector_process

            self.vector = self._exit.enter_context(vector_process(os.path.join(self.base, "vector")))
        settings: dict[str, dict[str, Any]] = {
            "node": {"name": NODE, "hall": HALL, "instance_id": "i-0123456789abcdef0",
                     "scheduler": self.scheduler},
            "relay": {"servers": [self.nats.url]},
            "metadata": {"provider": self.provider, "url": self.meta.url,
                         "poll_interval_s": self.poll_interval_s, "timeout_s": 1.0},
            "kubernetes": {"api_url": self.kube.url, "token_file": "", "timeout_s": 2.0},
            "contract": {"trust_dir": os.path.join(self.base, "trust"),
                         "launch_path": os.path.join(self.base, "contract-launch.json")},
        }
        if self.vector is not None:
            settings["spool"] = {"vector_url": self.vector.url}
        for section, table in self.extra.items():
            settings.setdefault(section, {}).update(table)
        os.makedirs(os.path.join(self.base, "trust"), mode=0o755, exist_ok=True)
        if self.contract is not None:
            self.write_launch_contract(self.contract, extra=self.contract_extra)
        self.agent = AgentRig(os.path.join(self.base, "agent"), settings)
        self.agent.extra_env = dict(self.env)
        self._exit.callback(self.agent.stop)
        self.agent.start()
        # NATS core has no replay: a notice published before the subscription exists is gone
        # (in production the metadata poll covers that window). Tests publish after it.
        wait_for(lambda: "relay.connected" in self.agent.log("watcher"), 20, "the watcher's relay subscription")

    def write_launch_contract(self, drain: dict[str, Any], serial: int = 1,
                              extra: dict[str, Any] | None = None) -> str:
        """Sign a launch contract with a fresh key, as cloud-init would place it (trust dir + launch file)."""
        return self.sign_bundle(drain, serial, os.path.join(self.base, "contract-launch.json"), extra)

    def sign_bundle(self, drain: dict[str, Any], serial: int, out: str,
                    extra: dict[str, Any] | None = None, key: str = "hall", trust_new_key: bool = True) -> str:
        """A bundle signed with ``key`` (made on first use, and trusted unless ``trust_new_key`` is
        false; its public half is keys/<key>.pub) -- the operator's CLI does it."""
        from agentctl.contract_cli import main as contract_cli

        keys = os.path.join(self.base, "keys")
        os.makedirs(keys, mode=0o700, exist_ok=True)
        if not os.path.exists(os.path.join(keys, f"{key}.key")):
            assert contract_cli(["keygen", "--out", os.path.join(keys, key)]) == 0
            if trust_new_key:
                self.trust_key(key)
        payload = {"serial": serial, "hall": HALL, "node_class": "*", "issued_at": format_rfc3339(time.time()),
                   "drain": drain, **(extra or {})}
        payload_path = os.path.join(keys, f"payload-{serial}.json")
        with open(payload_path, "w") as f:
            f.write(ujson.dumps(payload))
        assert contract_cli(["sign", "--key", os.path.join(keys, f"{key}.key"), "--in", payload_path,
                             "--out", out, "--keyid", key]) == 0
        return out

    def trust_key(self, key: str) -> None:
        """Put keys/<key>.pub into the node's trust directory, as an operator rotating keys does."""
        with open(os.path.join(self.base, "keys", f"{key}.pub"), "rb") as src, \
                open(os.path.join(self.base, "trust", f"{key}.pub"), "wb") as dst:
            dst.write(src.read())

    # -- notices ------------------------------------------------------------------------
    def notice_payload(self, *, deadline_in: float = 120.0, kind: str = "reclaim", node: str = NODE,
                       notice_id: str | None = None) -> dict[str, Any]:
        return relay_payload(notice_id, kind, node, deadline_in=deadline_in)

    def publish_notice(self, **kw: Any) -> dict[str, Any]:
        doc = self.notice_payload(**kw)
        node = doc["node"].replace(".", "_")
        self.nats.publish(f"sco.notice.{HALL}.{node}", ujson.dumps(doc).encode())
        return doc

    def publish_raw(self, payload: bytes, node: str = NODE) -> None:
        self.nats.publish(f"sco.notice.{HALL}.{node}", payload)

    # -- observations ---------------------------------------------------------------------
    @property
    def spool_path(self) -> str:
        return os.path.join(self.agent.state_dir, "spool.dat")

    def events(self) -> list[dict[str, Any]]:
        """Every event in the spool file, oldest first (read with the operator's reader)."""
        from spool.reader import iter_records

        if not os.path.exists(self.spool_path):
            return []
        out = []
        for rec in iter_records(self.spool_path, from_head=False):
            try:
                out.append(ujson.loads(rec.payload))
            except ValueError:
                continue
        return out

    def events_of(self, type: str, notice_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["type"] == type and (notice_id is None or e["notice_id"] == notice_id)]

    def wait_event(self, type: str, notice_id: str | None = None, timeout: float = 20.0) -> dict[str, Any]:
        return wait_for(lambda: (self.events_of(type, notice_id) or [None])[0], timeout,
                        f"event {type} in the spool")

    def node(self, name: str = NODE) -> dict[str, Any]:
        return self.kube.node(name)

    def cordoned(self, name: str = NODE) -> bool:
        return bool(self.node(name).get("spec", {}).get("unschedulable"))
