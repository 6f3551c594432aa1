"""Every parser of untrusted input, fed anything: a result or a counted rejection, never a crash."""
from __future__ import annotations

import io

import pytest
import ujson
import zmq
from hypothesis import given
from hypothesis import strategies as st

from common.log import Logger
from tests.support.fuzzing import fuzz
from tests.watcher.conftest import make_config
from watcher.__main__ import Watcher
from watcher.nats_creds import CredsError, decode_user_seed
from watcher.providers import MetadataError, aws, azure, gcp, sco

FUZZ = fuzz(150)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=5),
    max_leaves=12)
times = st.sampled_from(["2026-11-29T12:00:00Z", "Mon, 19 Sep 2016 18:29:47 GMT", "1 Jan 2030 01:03:47 GMT",
                         "", "32 Jan 2030 01:03:47 GMT", "2026-13-01T00:00:00Z"])


def bodies(keys: list[str]) -> st.SearchStrategy[bytes]:
    """Raw bytes, any JSON, and near-miss documents built from the real keys."""
    near = st.dictionaries(st.sampled_from(keys), json_values | times, max_size=len(keys) + 1)
    return st.binary(max_size=600) | json_values.map(ujson.dumps).map(str.encode) | \
        near.map(ujson.dumps).map(str.encode) | st.lists(near, max_size=4).map(ujson.dumps).map(str.encode)


def rejected_cleanly(fn) -> None:
    try:
        fn()
    except MetadataError as e:
        assert e.reason and len(e.detail) <= 300


@FUZZ
@given(bodies(["action", "time", "noticeTime"]))
def test_aws_spot_and_rebalance(body):
    rejected_cleanly(lambda: aws.parse_instance_action(body, "n", "i", 0.0))
    rejected_cleanly(lambda: aws.parse_rebalance(body, "n", "i", 0.0))


@FUZZ
@given(bodies(["Code", "State", "EventId", "NotBefore", "Description"]))
def test_aws_maintenance(body):
    rejected_cleanly(lambda: aws.parse_maintenance(body, "n", "i", 0.0))


@FUZZ
@given(st.text(max_size=80))
def test_gcp_values(text):
    rejected_cleanly(lambda: gcp.parse_preempted(text))
    rejected_cleanly(lambda: gcp.parse_maintenance_event(text))


@FUZZ
@given(bodies(["EventId", "EventType", "EventStatus", "Resources", "NotBefore", "Events"]))
def test_azure_events(body):
    def parse() -> None:
        events, refused = azure.parse_events(body)
        assert all(isinstance(e, MetadataError) for e in refused)
        for e in events:
            azure.event_notice(e, "n", 0.0)
    rejected_cleanly(parse)


@FUZZ
@given(bodies(["v", "id", "kind", "node", "issued_at", "deadline", "source", "instance_id"]))
def test_sco_notice(body):
    rejected_cleanly(lambda: sco.parse_notice_body(body, 8192, 0.0))


@FUZZ
@given(st.text(max_size=80))
def test_nkey_seed(text):
    try:
        decode_user_seed(text)
    except CredsError as e:
        assert str(e)


@pytest.fixture(scope="module")
def watcher(tmp_path_factory):
    """The real Watcher shell (sockets in a temp runtime dir), logging into a buffer."""
    run = tmp_path_factory.mktemp("run")
    config = make_config(node="node-a", paths={"runtime_dir": str(run), "state_dir": str(run)})
    ctx = zmq.Context()
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
    yield w
    ctx.destroy(linger=0)


relay_payloads = bodies(["v", "id", "kind", "node", "issued_at", "deadline", "source", "instance_id"]) | \
    st.fixed_dictionaries({"v": st.just(1), "id": st.text(min_size=1, max_size=8), "node": st.sampled_from(["node-a", "*", "b"]),
                           "kind": st.sampled_from(["reclaim", "cancel", "rebalance", "x"]),
                           "issued_at": times, "deadline": times}).map(ujson.dumps).map(str.encode)


@FUZZ
@given(relay_payloads)
def test_every_relay_payload_is_counted_exactly_once(watcher, payload):
    """Whatever arrives on the relay: one counter moves -- a rejection or what the notice did."""
    before = dict(watcher.counters)
    watcher.on_relay_payload(payload, "sco.notice.h1.node-a")
    moved = {k: v - before.get(k, 0) for k, v in watcher.counters.items() if v != before.get(k, 0)}
    outcome = {k: v for k, v in moved.items() if k.startswith("rejected.") or k.endswith(".relay")}
    assert list(outcome.values()) == [1], moved
