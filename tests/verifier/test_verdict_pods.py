"""The verdict names each pod the drain touched (issue 28, point 8): what became of it, when, why
it was held first; bounded so the verdict event still fits one spool record (spool.intake.MAX_RECORD)
on a node of 110+ pods with names at their longest, the cut counted (``pods_truncated``), what an
owner must act on first (still there, deleted, skipped, held) kept before the evicted."""
from __future__ import annotations

import time

from common.events import Origin, make_event
from common.notice import Notice
from common.pod_fate import PodFate, note_pod, pod_fate
from common.verdict import MAX_PODS, POD_OUTCOMES, PodLine, Verdict, VerdictRecord, decode_verdict
from spool.intake import MAX_RECORD, encode
from tests.support.drain_records import record
from verifier import core, metrics
from verifier.core import MAX_LEFT
from verifier.timeline import pod_lines

NOW = 1_800_000_000.0


def long_key(i: int) -> str:
    return f"{'n' * 63}/{i:05d}" + "p" * 248     # a namespace and a pod name at their longest


def test_each_pod_fate_follows_the_executors_events_and_a_hold_is_remembered():
    f = pod_fate(None, "drain.pod_held", {"pod": "ns/job", "reason": "extended"}, NOW)
    assert f == PodFate("extended", NOW, "extended")
    f = pod_fate(f, "drain.evicted", {"pod": "ns/job"}, NOW + 1)
    assert f == PodFate("evicted", NOW + 1, "extended")
    assert pod_fate(f, "drain.pod_held", {"pod": "ns/job", "reason": "wish:skip"}, NOW + 2) == f   # stays evicted
    assert pod_fate(None, "drain.eviction_blocked", {"pod": "ns/db"}, NOW) == PodFate("blocked", NOW, "pdb_blocked")
    assert pod_fate(None, "drain.cordoned", {"pod": "ns/x"}, NOW) is None


def test_a_pod_event_goes_into_every_ledger_of_the_notices_the_drain_serves():
    governing, served = {}, {}
    assert note_pod([governing, served], "drain.evicted", {"pod": "ns/web"}, NOW)
    assert governing == served == {"ns/web": PodFate("evicted", NOW)}
    assert not note_pod([governing], "drain.checkpoint_acked", {"pod": "ns/web"}, NOW)


def test_the_verdict_lists_the_pods_still_there_first_and_each_with_its_time():
    n = Notice(id="n1", kind="reclaim", node="me", instance_id="", issued_at=NOW, deadline=NOW + 120,
               source="aws")
    rec = record(n, pods={"ns/web": PodFate("evicted", NOW + 3), "ns/db": PodFate("blocked", NOW + 4, "pdb_blocked"),
                          "ns/keep": PodFate("skipped", NOW + 2)})
    lines, count = pod_lines(rec, ("ns/db", "ns/keep", "ns/new", "node:unreachable"), NOW + 9)
    got = {p.pod: (p.outcome, p.held) for p in lines}
    assert got == {"ns/web": ("evicted", ""), "ns/db": ("still_there", "pdb_blocked"), "ns/keep": ("skipped", ""),
                   "ns/new": ("still_there", "")}
    assert count == 4
    record_ = VerdictRecord.of(Verdict("overrun", "n1", NOW + 9), max_left=MAX_LEFT, pods=lines, pods_count=count)
    assert [p.outcome for p in record_.pods] == ["still_there", "still_there", "skipped", "evicted"]
    assert record_.pods[-1].at == "2027-01-15T08:00:03.000Z"
    assert decode_verdict(record_.to_dict()) == (record_, ())


def test_at_the_cap_with_long_names_the_verdict_event_fits_one_spool_record_and_counts_the_cut():
    """A node of 150 pods, every name at its longest, 100 of them still there (the verdict's
    ``left`` at its longest too), 200 checkpoint acks in the timeline."""
    keys = [long_key(i) for i in range(150)]
    fates = {k: PodFate("evicted", NOW + i, "extended") for i, k in enumerate(keys[100:])}
    n = Notice(id="n" * 256, kind="reclaim", node="me", instance_id="", issued_at=NOW, deadline=NOW + 120,
               source="aws")
    rec = record(n, pods=fates, pods_cut=7)
    left = tuple(keys[:100])
    lines, count = pod_lines(rec, left, NOW + 9)
    assert count == 157
    timeline = {"issued": 0, "checkpoint_acks": [{"client": "c" * 256 + f":{i}", "status": "checkpointed", "ms": i}
                                                 for i in range(200)], "checkpoint_acks_total": 1024}
    vr = VerdictRecord.of(Verdict("overrun", n.id, NOW + 9, left=left, held_up_by="evict"), max_left=MAX_LEFT,
                          pods=lines, pods_count=count, kind="reclaim", channel="relay", timeline_ms=timeline)
    event = make_event("drain.overrun", Origin("n" * 253, "h" * 64, "verifier"), 2 ** 40, notice_id=n.id,
                       data=vr.to_dict(), now=time.time())
    size = len(encode(event))
    print(f"verdict at the cap: {size} bytes, {len(vr.pods)} of {vr.pods_count} pods listed, "
          f"{len(vr.left)} of {vr.left_count} left, {len(vr.timeline_ms['checkpoint_acks'])} acks")
    assert size <= MAX_RECORD
    d = vr.to_dict()
    assert 0 < len(d["pods"]) < 157 and d["pods_count"] == 157 and d["pods_truncated"] == 157 - len(d["pods"])
    ranks = [POD_OUTCOMES.index(p["outcome"]) for p in d["pods"]]
    assert ranks == sorted(ranks) and d["pods"][0]["outcome"] == "still_there"   # what to act on, first
    # To make room, the timeline's acks and the tail of ``left`` were cut; their counts stay exact.
    assert d["left_count"] == 100 and 0 < len(d["left"]) < 100
    assert d["timeline_ms"]["checkpoint_acks_total"] == 1024 and len(d["timeline_ms"]["checkpoint_acks"]) < 200


def test_many_short_names_are_listed_up_to_max_pods():
    lines = [PodLine(f"ns/p{i}", "evicted", "2027-01-15T08:00:00.000Z") for i in range(MAX_PODS + 50)]
    vr = VerdictRecord.of(Verdict("done", "n1", NOW), max_left=MAX_LEFT, pods=lines)
    assert len(vr.pods) == MAX_PODS and vr.pods_count == MAX_PODS + 50 and vr.pods_truncated == 50


def test_a_damaged_pod_line_is_dropped_alone_and_said():
    d = VerdictRecord.of(Verdict("done", "n1", NOW), max_left=MAX_LEFT,
                         pods=[PodLine("ns/a", "evicted", "t")]).to_dict()
    d["pods"].append({"pod": 5, "outcome": "evicted", "at": "t"})
    rec, bad = decode_verdict(d)
    assert [p.pod for p in rec.pods] == ["ns/a"] and bad == ("pods",)


def test_the_verdicts_pods_feed_the_skipped_and_extended_counter():
    state = core.new_state()
    metrics.count_pods(state["metrics"], [PodLine("ns/a", "skipped", "t"), PodLine("ns/b", "evicted", "t", "extended"),
                                          PodLine("ns/c", "evicted", "t", "anything else")])
    text = metrics.render(state["metrics"])
    assert 'sco_agent_verdict_pods_total{outcome="skipped",held="none"} 1' in text
    assert 'sco_agent_verdict_pods_total{outcome="evicted",held="extended"} 1' in text
    assert 'sco_agent_verdict_pods_total{outcome="evicted",held="other"} 1' in text


def test_sco_agentctl_status_shows_the_volumes_and_the_pods_of_the_last_verdict():
    from agentctl.status import AgentFiles, render_text, summarize

    vr = VerdictRecord.of(Verdict("volumes_attached", "n1", NOW, volumes=("kubernetes.io/csi/x^vol-1",)),
                          max_left=MAX_LEFT, pods=[PodLine("ns/db-0", "evicted", "2027-01-15T08:00:00.000Z"),
                                                   PodLine("ns/keep", "skipped", "2027-01-15T08:00:01.000Z")])
    s = summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(verifier={"verdicts": {"n1": vr.to_dict()}}),
                  now=NOW + 10)
    text = render_text(s)
    assert "volumes still attached (1): kubernetes.io/csi/x^vol-1" in text
    assert "pods (2): ns/keep skipped, ns/db-0 evicted" in text
