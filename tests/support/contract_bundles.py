"""Shared test doubles for the contract tests: keys, signed bundles, a local HTTP server."""
from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.contract import Contract
from watcher.contract_verify import PAYLOAD_TYPE, NodeScope, pae

SCOPE = NodeScope(hall="fra1", node_class="gpu")


def payload(serial: int = 5, **overrides: Any) -> dict[str, Any]:
    """A valid full payload for SCOPE; keyword arguments replace top-level fields."""
    base: dict[str, Any] = {
        "serial": serial,
        "hall": "fra1",
        "node_class": "gpu",
        "issued_at": "2026-11-29T12:00:00Z",
        "drain": {"budget_s": 100, "checkpoint_s": 40, "evict_s": 50, "margin_s": 10},
        "taint_key": "sco.io/notice",
        "checkpoint_signal": "SIGUSR1",
        "kinds": {"reclaim": "drain", "rebalance": "cordon", "maintenance": "drain"},
        "pdb_blocked": "delete",
        "exclude_from_lb": True,
        "slurm": {"signal": "USR1", "signal_scope": "batch", "on_drain": "requeue"},
        "sink_url": "http://127.0.0.1:8686/events",
    }
    base.update(overrides)
    return base


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Key:
    """A test signing key: ``raw_public`` is what a trust directory holds."""

    keyid: str
    private: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def raw_public(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def pem_public(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, body: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
        return self.private.sign(pae(payload_type, body))

    def bundle(self, content: dict[str, Any] | bytes, keyid: str | None = None,
               payload_type: str = PAYLOAD_TYPE) -> bytes:
        """A signed envelope over ``content`` (a payload dict, or exact payload bytes)."""
        body = content if isinstance(content, bytes) else json.dumps(content).encode()
        return json.dumps({
            "payloadType": payload_type,
            "payload": b64(body),
            "signatures": [{"keyid": self.keyid if keyid is None else keyid,
                            "sig": b64(self.sign(body, payload_type))}],
        }).encode()


@pytest.fixture
def key() -> Key:
    return Key("ops-2026")


@pytest.fixture
def trusted(key: Key) -> dict[str, bytes]:
    return {key.keyid: key.raw_public}


@pytest.fixture
def current(key: Key) -> Contract:
    """A contract the node already runs (serial 5, from a bundle)."""
    return Contract.from_payload(payload(5), source="bundle")


# --- a tiny local HTTP server whose responses each test scripts -------------------------

Reply = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class BundleServer:
    """Serves whatever ``reply`` does; records request headers. Bound to a free loopback port."""

    reply: Reply
    requests: list[dict[str, str]] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/contract/fra1.json"


@pytest.fixture
def bundle_server() -> Iterator[Callable[[Reply], BundleServer]]:
    started: list[BundleServer] = []

    def start(reply: Reply) -> BundleServer:
        box = BundleServer(reply)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                box.requests.append(dict(self.headers))
                box.reply(self)

            def log_message(self, *args: object) -> None:
                pass  # keep test output clean

        box.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        box.server.daemon_threads = True
        threading.Thread(target=box.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        started.append(box)
        return box

    yield start
    for box in started:
        assert box.server is not None
        box.server.shutdown()
        box.server.server_close()


def respond(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Reply:
    """A reply that sends ``status``, ``headers`` and ``body`` with a correct Content-Length."""
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return reply
