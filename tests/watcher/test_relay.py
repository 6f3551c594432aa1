"""The relay adapter against a real nats-server: subjects, down at start, restarts, TLS, credentials."""
from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from typing import Any, Self

import pytest

from tests.support import authkit
from tests.support.agent_rig import REPO
from tests.support.nats_rig import NatsServer
from tests.support.wait import wait_for
from tests.watcher.conftest import make_config
from watcher.nats_creds import CredsError, read_creds
from watcher.relay import CONNECT_ATTEMPT_S, run_relay

NODE_SUBJECT, HALL_SUBJECT = "sco.notice.h1.node_a_internal", "sco.notice.h1.all"


class RelayHarness:
    """``run_relay`` on its own event loop in a thread; keeps payloads and statuses."""

    def __init__(self, **relay: Any) -> None:
        self.config = make_config(node="node.a.internal", relay=relay)
        self.payloads: list[tuple[str, bytes]] = []
        self.statuses: list[str] = []
        self.details: list[str] = []
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        self._started.set()
        await run_relay(self.config, lambda p, s: self.payloads.append((s, p)),
                        self._on_status, self.stop_event)

    def _on_status(self, status: str, detail: str) -> None:
        self.details.append(detail)
        self.statuses.append(status)

    def __enter__(self) -> Self:
        self._thread.start()
        self._started.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(RuntimeError):   # run_relay may have returned already (loop closed)
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self._thread.join(10)
        assert not self._thread.is_alive(), "run_relay did not return after stop"

    def count(self, status: str) -> int:
        return self.statuses.count(status)

    def wait_status(self, status: str, at_least: int = 1, timeout: float = 10.0) -> None:
        wait_for(lambda: self.count(status) >= at_least, timeout, f"relay status {status!r} x{at_least}")

    def wait_payload(self, payload: bytes, timeout: float = 10.0) -> str:
        return wait_for(lambda: next((s for s, p in self.payloads if p == payload), None), timeout,
                        f"payload {payload!r}")


def publish_with_client(url: str, subject: str, payload: bytes, **options: Any) -> None:
    """Publish with nats-py itself (TLS and credentials need a real client)."""
    import nats

    async def go() -> None:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5, **options)
        await nc.publish(subject, payload)
        await nc.flush()
        await nc.close()
    asyncio.run(go())


def test_node_and_hall_subjects_only(nats):
    with RelayHarness(servers=[nats.url]) as relay:
        relay.wait_status("connected")
        nats.publish("sco.notice.h1.node_b", b"not ours")
        nats.publish(NODE_SUBJECT, b"one")
        nats.publish(HALL_SUBJECT, b"two")
        assert relay.wait_payload(b"one") == NODE_SUBJECT
        assert relay.wait_payload(b"two") == HALL_SUBJECT
        assert b"not ours" not in [p for _, p in relay.payloads]


def test_server_down_at_start_then_up(tmp_path):
    server = NatsServer(str(tmp_path / "nats.log"))
    with RelayHarness(servers=[server.url]) as relay:
        relay.wait_status("error")          # refused, counted, retried
        try:
            server.start()
            relay.wait_status("connected", timeout=15)
            server.publish(NODE_SUBJECT, b"late but heard")
            relay.wait_payload(b"late but heard")
        finally:
            server.stop()


def test_resubscribes_after_a_server_restart(nats):
    with RelayHarness(servers=[nats.url]) as relay:
        relay.wait_status("connected")
        nats.stop()
        relay.wait_status("disconnected")
        nats.start()
        relay.wait_status("reconnected", timeout=15)

        def heard() -> bool:
            nats.publish(NODE_SUBJECT, b"after restart")    # re-published until heard, as a relay would
            return any(p == b"after restart" for _, p in relay.payloads)
        wait_for(heard, 10, "a payload through the re-sent subscription", interval=0.2)


def test_stop_while_connecting_returns(tmp_path):
    server = NatsServer()   # never started
    with RelayHarness(servers=[server.url]) as relay:
        relay.wait_status("error")


def test_no_servers_disables_the_relay():
    with RelayHarness(servers=[]) as relay:
        wait_for(lambda: relay.statuses == ["disabled"], 5, "disabled")


def test_mutual_tls(tmp_path):
    paths = authkit.tls_setup(str(tmp_path))
    server = NatsServer(str(tmp_path / "nats.log"), args=["-c", paths["tls.conf"]]).start()
    try:
        url = f"tls://127.0.0.1:{server.port}"
        with RelayHarness(servers=[url], tls_ca=paths["ca.pem"], tls_cert=paths["client.pem"],
                          tls_key=paths["client-key.pem"]) as relay:
            relay.wait_status("connected")
            import ssl
            ctx = ssl.create_default_context(cafile=paths["ca.pem"])
            ctx.load_cert_chain(paths["client.pem"], paths["client-key.pem"])
            publish_with_client(url, NODE_SUBJECT, b"over tls", tls=ctx)
            relay.wait_payload(b"over tls")
    finally:
        server.stop()


def test_tls_without_a_client_certificate_is_refused_and_retried(tmp_path):
    paths = authkit.tls_setup(str(tmp_path))
    server = NatsServer(str(tmp_path / "nats.log"), args=["-c", paths["tls.conf"]]).start()
    try:
        with RelayHarness(servers=[f"tls://127.0.0.1:{server.port}"], tls_ca=paths["ca.pem"]) as relay:
            relay.wait_status("error", at_least=2)
            assert relay.count("connected") == 0
    finally:
        server.stop()


def test_a_relay_certificate_without_rfc5280_extensions_is_refused_naming_what_is_missing(tmp_path):
    """Strict X.509 on every interpreter (common/http.py STRICT_X509): the relay's certificate lacks
    the authorityKeyIdentifier RFC 5280 requires. Python 3.13 refuses it by default; the agent refuses
    it on 3.11 and 3.12 too, and each attempt is an error (counted and sent to the spool as
    relay.error by the watcher) that names the missing extension, then retried."""
    paths = authkit.tls_setup(str(tmp_path), rfc5280=False)
    server = NatsServer(str(tmp_path / "nats.log"), args=["-c", paths["tls.conf"]]).start()
    try:
        with RelayHarness(servers=[f"tls://127.0.0.1:{server.port}"], tls_ca=paths["ca.pem"],
                          tls_cert=paths["client.pem"], tls_key=paths["client-key.pem"]) as relay:
            def refusals() -> list[str]:
                return [d for d in relay.details if "strict X.509" in d and "Missing Authority Key Identifier" in d]

            # Refused, then refused again: nats-py's hang after the first refusal (relay.py
            # CONNECT_ATTEMPT_S) does not silence the relay for good.
            wait_for(lambda: len(refusals()) >= 2, 3 * CONNECT_ATTEMPT_S, "two refusals naming the extension")
            assert relay.count("connected") == 0
            others = [d for s, d in zip(relay.statuses, relay.details, strict=True)
                      if s == "error" and d not in refusals()]
            assert all("starting over" in d for d in others), others
    finally:
        server.stop()


def test_credentials_file(tmp_path):
    conf, creds = authkit.operator_setup(str(tmp_path))
    server = NatsServer(str(tmp_path / "nats.log"), args=["-c", conf]).start()
    try:
        with RelayHarness(servers=[server.url], credentials_file=creds) as relay:
            relay.wait_status("connected")
            publish_with_client(server.url, NODE_SUBJECT, b"authenticated",
                                # Why the noqa: the file is read at each callback, as nats-py's own creds reader does
                                user_jwt_cb=lambda: read_creds(creds)[0].encode(),  # noqa: PLW0108
                                signature_cb=_signer(creds))
            relay.wait_payload(b"authenticated")
        with RelayHarness(servers=[server.url]) as anonymous:
            anonymous.wait_status("error", at_least=2)
            assert anonymous.count("connected") == 0
    finally:
        server.stop()


def _signer(creds: str):
    from watcher.nats_creds import callbacks
    return callbacks(creds)[1]


@pytest.mark.parametrize("text,message", [
    ("", "no user JWT"),
    ("-----BEGIN NATS USER JWT-----\na.b.c\n------END\n", "no nkey seed"),
    ("-----BEGIN NATS USER JWT-----\na.b.c\n-----BEGIN USER NKEY SEED-----\nSUAAAAAA\n", "wrong length"),
])
def test_bad_credentials_files_are_named(tmp_path, text, message):
    path = tmp_path / "bad.creds"
    path.write_text(text)
    with pytest.raises(CredsError, match=message):
        read_creds(str(path))


def test_a_seed_of_another_kind_is_refused(tmp_path):
    account = authkit.NKey.new("account")
    path = tmp_path / "acct.creds"
    path.write_text(authkit.creds_text("a.b.c", account.seed))
    with pytest.raises(CredsError, match="not a user"):
        read_creds(str(path))


def test_aiohttp_is_not_imported_unless_a_websocket_server_is_configured(tmp_path):
    """nats-py imports aiohttp at import time when it is installed; only ws:// servers need it."""
    fake = tmp_path / "aiohttp"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os\nopen(os.environ['MARK'], 'w').close()\n")
    code = "import sys; from watcher.relay import import_nats; import_nats(sys.argv[1:])"
    for server, imported in (("nats://127.0.0.1:4222", False), ("ws://127.0.0.1:8080", True)):
        mark = tmp_path / f"imported-{imported}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), REPO]), MARK=str(mark))
        subprocess.run([sys.executable, "-c", code, server], env=env, check=True, timeout=60)
        assert mark.exists() is imported, server
