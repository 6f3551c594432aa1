"""Garbage on the ZeroMQ sockets between the processes: every receiver counts it, none crashes.

The runtime directory is 0700, so only the agent's own user can reach the
sockets; these properties are for the case where something did get in (a
squatter bound to a PUB path, a buggy peer, a half-upgraded node). Each
receiver's real handler is fed random frames through a stand-in socket, then
the process's next steps run on whatever was accepted -- a message that passes
validation must not crash the work it feeds (the executor's drain start, the
verifier's judge, the watcher's acknowledgements).
"""
from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Mapping

import pytest
import zmq
from hypothesis import example, given
from hypothesis import strategies as st

from common import ipc
from common.config import build
from common.contract import BUILTIN
from common.log import Logger
from common.progress import decode_progress
from common.runtime import SpoolLink
from common.verdict import BadNews, decode_verdict_news
from common.wire import LEVELS, BadRecord
from executor.__main__ import Executor
from spool.intake import Intake, Rejected, parse_event
from tests.support.drain_records import record_dict
from tests.support.fuzzing import Feed, fuzz, json_bytes, json_scalars, json_values, mutated, near, times
from verifier.__main__ import Verifier
from watcher.__main__ import Watcher

NODE = "node-a"
# Times a hostile peer might send: edges of the calendar and of the format.
TIMES = times | st.sampled_from(["2026-11-29T12:00:00Z", "2026-11-29T12:00:00.5+01:00",
                                 "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "0001-01-01T00:00:00Z",
                                 "1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "", "now"])
ODD_NUMBERS = st.sampled_from(["inf", "-inf", "nan", "1e400", 1e308, -1e308, 0, -1, 2**63]) | json_scalars
GOOD_NOTICE = {"id": "n1", "kind": "reclaim", "node": NODE, "instance_id": "i-1", "issued_at": "2026-11-29T12:00:00Z",
               "deadline": "2026-11-29T12:02:00Z", "source": "aws", "channel": "relay", "received_at": 1.8e9,
               "detail": "terminate"}
HOSTILE = {"id": st.text(min_size=1, max_size=8) | json_scalars,
           "kind": st.sampled_from(["rebalance", "maintenance", "cancel", "x"]) | json_scalars,
           "node": st.sampled_from(["*", "node-b"]) | json_scalars,
           "issued_at": TIMES | json_scalars, "deadline": TIMES | json_scalars, "received_at": ODD_NUMBERS,
           "channel": st.sampled_from(["metadata", "local", "x"]) | json_scalars,
           "instance_id": json_scalars, "source": json_scalars, "detail": json_scalars}


def fields_off(good: dict, hostile: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """A valid record with one or two fields replaced by something hostile, or left out."""
    missing = object()

    def apply(changes: dict) -> dict:
        out = {**good, **changes}
        return {k: v for k, v in out.items() if v is not missing}

    keys = st.lists(st.sampled_from(sorted(hostile)), min_size=1, max_size=2, unique=True)
    return keys.flatmap(lambda ks: st.fixed_dictionaries(
        {k: hostile[k] | st.just(missing) for k in ks})).map(apply)


notice_dicts = fields_off(GOOD_NOTICE, HOSTILE) | near(sorted(GOOD_NOTICE)) | json_values
notice_bodies = st.fixed_dictionaries({}, optional={
    "gen": json_scalars, "active": st.lists(notice_dicts, max_size=3) | json_values,
    "withdrawn": st.lists(st.text(max_size=8) | json_scalars, max_size=3) | json_values,
    "arrivals": st.dictionaries(st.text(max_size=8), st.dictionaries(
        st.sampled_from(["relay", "metadata", "local", "x"]), ODD_NUMBERS, max_size=3) | json_values, max_size=3),
    "counters": st.dictionaries(st.sampled_from(["rejected.bad_json", "contract.rejected.x", "x", "rejected."]),
                                json_scalars, max_size=3) | json_values,
    "started_at": ODD_NUMBERS})
contract_bodies = st.fixed_dictionaries({}, optional={
    "source": st.sampled_from(["bundle", "launch", "builtin", "x"]) | json_scalars,
    "contract": mutated(dict(BUILTIN.to_dict(), hall="h1")) | near(sorted(BUILTIN.to_dict())) | json_values})
# A drain record as the executor sends it, one or two fields replaced by something hostile or left out.
GOOD_RECORD = record_dict(received_at=1.8e9, steps={"cordoned": 1.8e9 + 1})
progress_records = fields_off(GOOD_RECORD, {
    "state": st.sampled_from(["running", "done", "cordoned_only"]) | json_scalars, "kind": json_scalars,
    "steps": st.dictionaries(st.sampled_from(["cordoned", "node_empty", "x"]), ODD_NUMBERS, max_size=3),
    "remaining": st.lists(st.text(max_size=6), max_size=3) | json_values, "phase": json_scalars,
    "acks": st.dictionaries(st.text(max_size=5), json_values, max_size=2),
    "budget": st.fixed_dictionaries(dict.fromkeys(("budget_s", "checkpoint_s", "evict_s", "margin_s"), ODD_NUMBERS))
    | json_values, "received_at": ODD_NUMBERS, "slurm": json_values}) | json_values
progress_bodies = st.fixed_dictionaries({}, optional={
    "notices": st.dictionaries(st.text(max_size=8), progress_records, max_size=3) | json_values})
escalate_bodies = st.fixed_dictionaries({}, optional={
    "notices": st.dictionaries(st.text(max_size=8), st.fixed_dictionaries(
        {"level": st.sampled_from(["checkpoint_over", "evict_over", "final", "x"]) | json_scalars},
        optional={"since": ODD_NUMBERS}) | json_values, max_size=3) | json_values})
verdict_bodies = st.fixed_dictionaries({}, optional={
    "notices": st.dictionaries(st.text(max_size=8), st.fixed_dictionaries(
        {"outcome": st.sampled_from(["done", "volumes_attached", "overrun", "x"]) | json_scalars},
        optional={"at": ODD_NUMBERS}) | json_values, max_size=3) | json_values})
ack_bodies = st.fixed_dictionaries({}, optional={"ids": st.lists(st.text(max_size=8) | json_scalars, max_size=4)
                                                | json_values})


def topic_and(topic: bytes, bodies: st.SearchStrategy) -> st.SearchStrategy[list[bytes]]:
    return json_bytes(bodies).map(lambda b: [topic, b])


def frames(*shaped: st.SearchStrategy[list[bytes]]) -> st.SearchStrategy[list[bytes]]:
    """Well-shaped messages of the right topic, plus anything at all on the wire."""
    topics = st.sampled_from(sorted(ipc.TOPICS)) | st.binary(max_size=12)
    anything = st.lists(st.binary(max_size=60), max_size=4)
    wrong_topic = st.tuples(topics, json_bytes() | st.binary(max_size=60)).map(list)
    return st.one_of(*shaped, anything, wrong_topic)


def quiet() -> Logger:
    return Logger("fuzz", stream=io.StringIO())


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    base = tmp_path_factory.mktemp("ipc")
    config = build({"node": {"name": NODE, "hall": "h1", "scheduler": "none"}, "spool": {"size_mb": 1},
                    "paths": {"runtime_dir": str(base / "run"), "state_dir": str(base / "state")},
                    "agent_socket": {"path": str(base / "run" / "agent.sock")},
                    "metadata": {"provider": "none"}, "relay": {"servers": []},
                    "contract": {"trust_dir": str(base / "trust"), "launch_path": str(base / "none.json")}})
    ipc.ensure_runtime_dir(config.paths.runtime_dir)
    ctx = zmq.Context()
    yield config, ctx
    ctx.destroy(linger=0)


@pytest.fixture(scope="module")
def executor(runtime):
    config, ctx = runtime
    ex = Executor(config, quiet(), ctx)
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def verifier(runtime):
    config, ctx = runtime
    return Verifier(config, quiet(), ctx)


@pytest.fixture(scope="module")
def watcher(runtime):
    config, ctx = runtime
    return Watcher(config, quiet(), ctx)


def each_applied_or_counted(messages: list[list[bytes]], receive: Callable[[Feed], None], bad: Callable[[], int],
                            applied_to: Mapping[bytes, Callable[[], object]]) -> None:
    """Feed the frames one at a time: each one is counted as bad or applied, never neither.

    ``applied_to[topic]()`` is the receiver's state that a message of ``topic`` replaces; a frame
    that does not decode must be counted once and replace nothing. A well-formed message of a topic
    the receiver does not subscribe to (a real SUB socket never delivers it) changes nothing.
    """
    for frames in messages:
        before_bad = bad()
        before = {topic: state() for topic, state in applied_to.items()}
        receive(Feed([frames]))
        counted = bad() - before_bad
        replaced = {topic for topic, state in applied_to.items() if state() is not before[topic]}
        try:
            topic, body = ipc.decode(frames)
        except ipc.BadMessage:
            assert (counted, replaced) == (1, set()), frames
            continue
        if topic not in applied_to:
            assert (counted, replaced) == (0, set()), frames
            continue
        assert replaced <= {topic}, frames
        assert counted or replaced, f"neither applied nor counted: {frames}"
        listed = body.get("active") if topic == ipc.T_NOTICE else None
        assert counted <= max(1, len(listed) + 1 if isinstance(listed, list) else 1), frames


def _notice_state(**changes: object) -> list[list[bytes]]:
    return [ipc.encode(ipc.T_NOTICE, {"active": [{**GOOD_NOTICE, **changes}, GOOD_NOTICE | {"id": "n2"}]})]


@fuzz(150)
@given(st.lists(frames(topic_and(ipc.T_NOTICE, notice_bodies), topic_and(ipc.T_CONTRACT, contract_bodies)),
                min_size=1, max_size=3))
# Found by this property: a deadline that parses but cannot be formatted again, and a
# received_at of inf or NaN, each crashed the executor at the drain's first step.
@example(_notice_state(deadline="9999-12-31T23:59:59-23:59"))
@example(_notice_state(deadline="0001-01-01T00:00:00+23:59"))
@example(_notice_state(received_at="inf"))
@example(_notice_state(received_at="nan"))
# Found by the long run (bench/fuzz.py): a finite but absurd received_at overflowed round(), and
# a deadline a second after 1970 put checkpoint_by before the epoch, which could not be read back.
@example(_notice_state(received_at=1e308))
@example(_notice_state(deadline="1970-01-01T00:00:01Z"))
def test_executor_watcher_feed(executor, messages):
    """Notice state and contracts from 'the watcher': each message counted or applied, and the drain
    work that follows (drain start, telling clients, publishing) runs on whatever was applied."""
    drains = executor.drains
    drains.records, drains.active, drains.withdrawn = {}, {}, frozenset()
    drains.contract_heard = True   # as after the real watcher's first announcement

    def receive(feed: Feed) -> None:
        executor.sub = feed
        executor.on_sub_readable()

    each_applied_or_counted(messages, receive, lambda: executor.bad_messages,
                            {ipc.T_NOTICE: lambda: drains.active, ipc.T_CONTRACT: lambda: drains.contract})
    drains.turn(1.8e9, 0.0)
    executor.publish()
    for n in drains.active.values():   # what was applied is a notice every step can use
        assert n.to_dict()["deadline"] and n.node in (NODE, "*")


@fuzz(100)
@given(st.lists(frames(topic_and(ipc.T_ESCALATE, escalate_bodies)), min_size=1, max_size=3))
def test_executor_verifier_feed(executor, messages):
    executor.escalate_sub = Feed(messages)
    executor.on_escalate_readable()
    assert all(level in LEVELS for level in executor.drains.levels.values())


@fuzz(150)
@given(st.lists(frames(topic_and(ipc.T_NOTICE, notice_bodies), topic_and(ipc.T_CONTRACT, contract_bodies),
                       topic_and(ipc.T_PROGRESS, progress_bodies)), min_size=1, max_size=4))
def test_verifier_feeds(verifier, messages):
    """Whatever 'the watcher' and 'the executor' say: counted or applied; judging, publishing and
    the metrics text then run on it."""
    verifier.started = 0.0
    each_applied_or_counted(messages, verifier.on_readable, lambda: verifier.bad_messages,
                            {ipc.T_NOTICE: lambda: verifier.active, ipc.T_CONTRACT: lambda: verifier.contract,
                             ipc.T_PROGRESS: lambda: verifier.progress})
    verifier.check(1.8e9)
    verifier.publish()
    from verifier import metrics

    metrics.render(verifier.state["metrics"], {})


@fuzz(100)
@given(st.lists(frames(topic_and(ipc.T_PROGRESS, progress_bodies)), min_size=1, max_size=3))
def test_watcher_executor_feed(watcher, messages):
    before = watcher.counters.get("ipc.rejected", 0) + sum(
        v for k, v in watcher.counters.items() if k.startswith("ipc.rejected."))
    watcher.progress_sub = Feed(messages)
    watcher.on_progress_readable()
    watcher.take_drained()
    after = watcher.counters.get("ipc.rejected", 0) + sum(
        v for k, v in watcher.counters.items() if k.startswith("ipc.rejected."))

    def unusable(frames: list[bytes]) -> bool:   # what the watcher cannot apply whole as progress
        try:
            _, refused = decode_progress(ipc.decode(frames)[1])
        except (ipc.BadMessage, BadRecord):
            return True
        return bool(refused)   # the good records in it are applied; the message is counted once
    assert after - before == sum(map(unusable, messages))   # each one counted, nothing else


@fuzz(100)
@given(st.lists(frames(topic_and(ipc.T_VERDICT, verdict_bodies)), min_size=1, max_size=3))
def test_watcher_verifier_feed(watcher, messages):
    """The verdicts an Azure acknowledgement waits for (watcher.ack_gate): each message that is not
    one is counted once; none stops the watcher or passes a drain on that is not done."""
    def rejected() -> int:
        return sum(v for k, v in watcher.counters.items() if k.startswith("ipc.rejected"))
    before = rejected()
    watcher.verdict_sub = Feed(messages)
    watcher.on_progress_readable()
    assert watcher.take_drained() == []      # no drain is done: a verdict alone acknowledges nothing

    def unusable(frames: list[bytes]) -> bool:
        try:
            decode_verdict_news(ipc.decode(frames)[1])
        except (ipc.BadMessage, BadNews):
            return True
        return False
    assert rejected() - before == sum(map(unusable, messages))


LINK_NAMES = itertools.count()


@fuzz(100)
@given(st.lists(frames(topic_and(ipc.T_ACK, ack_bodies)), min_size=1, max_size=3))
def test_spool_link_acks(runtime, messages):
    """Whatever comes back on a process's spool link: counted, or ids acknowledged; never a crash."""
    config, ctx = runtime
    # A name of its own per example: each link journals under the state dir, and a journal
    # left by the previous example would be replayed into this one's outbox.
    link = SpoolLink(ctx, config, f"fuzz-{next(LINK_NAMES)}", quiet())
    try:
        ev = link.emit("notice.rejected")
        link.sock.close()
        link.sock = Feed(messages)
        link.on_readable()
        assert link.bad_acks <= len(messages)
        # Left unacknowledged: the event sent, and the link's own reports of what it refused.
        assert {e["type"] for eid, (_, e) in link.outbox.pending.items() if eid != ev["event_id"]} <= {"ipc.rejected"}
    finally:
        link.close()


@pytest.fixture(scope="module")
def spool(runtime):
    from spool.__main__ import Spool

    config, ctx = runtime
    sp = Spool(config, quiet(), ctx)
    yield sp
    if sp.shipper is not None:   # a contract naming a sink started one
        sp.shipper.stop()
    sp.store.close()


@fuzz(100)
@given(st.lists(frames(topic_and(ipc.T_CONTRACT, contract_bodies)), min_size=1, max_size=3))
def test_spool_watcher_feed(spool, messages):
    """The spool hears the contract (for its sink URL) on watcher.pub: counted, or the sink set."""
    before = spool.rejected
    spool.sub = Feed(messages)
    spool.on_contract()
    assert before <= spool.rejected <= before + len(messages)
    assert spool.sink is None or spool.sink.startswith(("http://", "https://"))


intake_messages = st.tuples(st.binary(max_size=8), st.sampled_from([ipc.T_EVENT, ipc.T_ACK, b"x"]),
                            json_bytes(near(["event_id", "type", "seq", "ts", "data", "notice_id"])
                                       | json_values) | st.binary(max_size=80)).map(list) | \
    st.lists(st.binary(max_size=40), max_size=4)


@fuzz(300)
@given(st.lists(intake_messages, min_size=1, max_size=5))
def test_spool_intake_from_a_foreign_writer(messages):
    """The spool ROUTER, fed anything: a storable one-line JSON event, or a Rejected; the intake
    then holds at most what it accepted."""
    intake = Intake()
    accepted = 0
    for frames_ in messages:
        try:
            sender, event_id, payload = parse_event(frames_)
        except Rejected as e:
            assert str(e)
            continue
        assert b"\n" not in payload and len(payload) <= 65535
        intake.offer(sender, event_id, payload)
        accepted += 1
    assert len(intake.held) <= accepted


def test_decode_refuses_with_a_reason():
    """Each kind of garbage gets its own bounded reason (a counter label)."""
    cases = {"frames": [b"notice"], "topic": [b"nope", b"{}"], "too_large": [b"notice", b" " * (ipc.MAX_MESSAGE + 1)],
             "bad_json": [b"notice", b"{"], "not_object": [b"notice", b"[]"]}
    for reason, message in cases.items():
        with pytest.raises(ipc.BadMessage) as e:
            ipc.decode(message)
        assert e.value.reason == reason
