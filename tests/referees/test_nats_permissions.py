"""deploy/nats/: a node's credential can only listen to its own notices; only the relay can publish.

Against the real nats-server running the shipped configuration and account claims
(tests/referees/nats_hall.py): the server itself refuses what the permissions forbid, and the
agent's real relay adapter (watcher/relay.py, through the harness of tests/watcher/test_relay.py)
runs with a node's .creds and hears a notice the relay publisher sends.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.referees.nats_hall import Hall, account_claims
from tests.support.wait import wait_for
from tests.watcher.test_relay import RelayHarness
from watcher.nats_creds import callbacks

NODE = "node.a.internal"        # tests/watcher/conftest.py make_config: hall h1
NODE_USER = NODE.replace(".", "_")
PROBE = b'{"probe": true}'


@pytest.fixture
def hall(tmp_path) -> Iterator[Hall]:
    h = Hall(str(tmp_path))
    h.server.start()
    try:
        yield h
    finally:
        h.server.stop()


async def _session(url: str, creds: str, subscribe: tuple[str, ...], publish: tuple[str, ...],
                   errors_expected: int) -> list[str]:
    """Connect with ``creds``, subscribe, publish; the errors the server sent, once as many as
    expected have arrived (they reach nats-py's error_cb asynchronously, after the flush)."""
    import nats

    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    user_jwt, sign = callbacks(creds)
    nc = await nats.connect(url, user_jwt_cb=user_jwt, signature_cb=sign, error_cb=on_error,
                            allow_reconnect=False, connect_timeout=5)
    try:
        for subject in subscribe:
            await nc.subscribe(subject)
        for subject in publish:
            await nc.publish(subject, PROBE)
        await nc.flush(timeout=5)
        async with asyncio.timeout(10):
            while len(errors) < errors_expected:
                await asyncio.sleep(0.02)
    finally:
        await nc.close()
    return errors


def session(url: str, creds: str, subscribe: tuple[str, ...] = (), publish: tuple[str, ...] = (),
            errors: int = 0) -> list[str]:
    return asyncio.run(_session(url, creds, subscribe, publish, errors))


def test_the_templates_name_exactly_the_agents_subjects():
    from common.notice import relay_subjects

    roles = {k["role"]: k["template"] for k in account_claims()["nats"]["signing_keys"]}
    node = roles["node"]
    rendered = [s.replace("{{tag(hall)}}", "h1").replace("{{name()}}", NODE_USER) for s in node["sub"]["allow"]]
    assert tuple(rendered) == relay_subjects("h1", NODE)
    assert node["pub"] == {"deny": [">"]} and "allow" not in node["pub"]
    assert roles["relay"]["sub"] == {"deny": [">"]} and "deny" not in roles["relay"]["pub"]


def test_a_node_credential_cannot_publish_a_notice(hall):
    node = hall.creds("node", NODE_USER, "h1")
    subjects = ("sco.notice.h1.all", f"sco.notice.h1.{NODE_USER}")
    errors = session(hall.server.url, node, publish=subjects, errors=2)
    assert errors == [f'nats: permissions violation for publish to "{s}"' for s in subjects]
    assert 'Publish Violation - Subject "sco.notice.h1.all"' in hall.log()


def test_a_node_credential_cannot_listen_to_another_hall_or_node(hall):
    node = hall.creds("node", NODE_USER, "h1")
    for subject in ("sco.notice.h2.all", f"sco.notice.h2.{NODE_USER}", "sco.notice.h1.node_b", "sco.notice.>", ">"):
        errors = session(hall.server.url, node, subscribe=(subject,), errors=1)
        assert errors == [f'nats: permissions violation for subscription to "{subject}"']


def test_the_relay_publisher_only_publishes_and_only_its_hall(hall):
    relay = hall.creds("relay", "relay-h1", "h1")
    errors = session(hall.server.url, relay, subscribe=("sco.notice.h1.all",),
                             publish=("sco.notice.h2.all", "sco.notice.h1.all"), errors=2)
    assert errors == ['nats: permissions violation for subscription to "sco.notice.h1.all"',
                      'nats: permissions violation for publish to "sco.notice.h2.all"']


def test_the_real_relay_adapter_runs_with_a_node_credential_and_hears_its_notices(hall):
    node = hall.creds("node", NODE_USER, "h1")
    relay = hall.creds("relay", "relay-h1", "h1")
    other_hall = hall.creds("relay", "relay-h2", "h2")
    with RelayHarness(servers=[hall.server.url], credentials_file=node) as watcher:
        watcher.wait_status("connected")
        # Another hall's relay publishes first: that notice must never reach this node.
        session(hall.server.url, other_hall, publish=("sco.notice.h2.all", f"sco.notice.h2.{NODE_USER}"))
        session(hall.server.url, relay, publish=(f"sco.notice.h1.{NODE_USER}", "sco.notice.h1.all"))
        wait_for(lambda: len(watcher.payloads) >= 2, 10, "both notices at the relay adapter")
    assert "error" not in watcher.statuses, watcher.statuses   # no permissions violation for the agent
    assert watcher.payloads == [(f"sco.notice.h1.{NODE_USER}", PROBE), ("sco.notice.h1.all", PROBE)]
