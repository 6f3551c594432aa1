"""Every message between the processes fits what its receivers accept (common.ipc.MAX_MESSAGE),
whatever legal input fed it: computed here at its worst from the code's own limits.

libzmq drops the connection of a peer that sends more than the receiver's ZMQ_MAXMSGSIZE
(zmq_setsockopt(3)), so a message past the limit is a deaf receiver; the sender's refusal of one
and the count of a drop are in tests/common/test_ipc_bounds.py.
"""
from __future__ import annotations

import time

from common import ipc, notice_state, progress, wire
from common.contract import BUILTIN
from common.notice import _MAX_FIELD, CHANNELS, Notice
from common.pod_fate import PodFate
from common.verdict import VerdictRecord, encode_verdict_news
from common.wire import Ack, DrainRecord, DrainState, Step
from executor.socket_wire import MAX_NAME
from watcher import notice_book
from watcher.notice_book import NoticeBook

NODE = "n" * 253                # a Kubernetes node name at its longest (DNS subdomain)
# One character JSON writes longest: a control character is written \u0001, six bytes.
WIDE = "\x01"


def worst(tag: str, n: int = _MAX_FIELD) -> str:
    """A text field of a relay notice at its longest, nearly every character written as six bytes."""
    return (tag + WIDE * n)[:n]


def payload(topic: bytes, body: dict) -> int:
    return len(ipc.encode(topic, body)[1])


def fill_book(make_id, text=worst) -> tuple[NoticeBook, list[str]]:
    """Notices until the book refuses, each heard on every channel; then 5,000 cancelled notices.
    ``make_id`` and ``text`` make the ids and the other text fields."""
    book = NoticeBook(node=NODE)
    now = time.time()
    refused: list[str] = []
    i = 0
    while not refused:
        n = Notice(make_id(f"a{i}"), "maintenance", NODE, text("i"), now, now + 600 + i, text("s"),
                   channel="relay", detail=text("d"))
        out = book.observe(n, now)
        if out.action == "ignored":
            refused.append(out.reason)
            break
        for channel in CHANNELS[1:]:
            book.observe(Notice(make_id(f"{channel}{i}"), "maintenance", NODE, n.instance_id, now, n.deadline,
                                n.source, channel=channel, detail=n.detail), now)
        i += 1
    for j in range(5000):
        wid = make_id(f"w{j}")
        book.observe(Notice(wid, "maintenance", NODE, "", now, now + 60, "sco"), now)
        book.observe(Notice(wid, "cancel", NODE, "", now, now + 60, "sco"), now)
    return book, refused


def state_of(book: NoticeBook, counters: dict[str, int]) -> notice_state.NoticeState:
    """As the watcher announces it (watcher/__main__.py Watcher.announce)."""
    return notice_state.NoticeState(active=book.active, withdrawn=book.recent_withdrawn(), arrivals=book.arrivals,
                            counters=counters, started_at=time.time(), gen=book.gen)


def test_the_budgets_fit_the_receivers_limit():
    assert notice_state.NOTICE_STATE_BUDGET <= ipc.MAX_MESSAGE
    assert progress.PROGRESS_BUDGET <= ipc.MAX_MESSAGE


def test_the_notice_state_at_its_worst_fits_and_the_notice_past_the_bound_is_refused():
    """Active notices with every field at its longest (six bytes a character) until the book refuses
    one (by what they take: ``active_too_large``), each heard on all three channels; 5,000 notices
    with 256-character ids cancelled; far more counters than the watcher has. Without the bounds the
    message was 288,503 bytes for 3,000 cancelled 93-character ids (issue 26)."""
    book, refused = fill_book(worst)
    assert refused == ["active_too_large"]
    assert len(book.withdrawn) == notice_book.MAX_WITHDRAWN   # the watcher still remembers them all
    counters = {f"metadata.error.reason_{i:04d}_" + "x" * 60: i for i in range(5000)}
    size = payload(ipc.T_NOTICE, state_of(book, counters).encode())
    print(f"notice state at its worst: {size} bytes, {len(book.active)} active notices")
    assert size <= notice_state.NOTICE_STATE_BUDGET <= ipc.MAX_MESSAGE
    body = state_of(book, counters).encode()
    assert len(body["withdrawn"]) <= notice_state.RECENT_WITHDRAWN and body["counters"]["counters.dropped"] > 0
    # The active notices are all there.
    assert set(notice_state.decode_notice_state(body, NODE).active) == set(book.active)


def test_at_most_max_active_notices_of_ordinary_size_and_the_next_is_refused():
    """93-character ids (the flood issue 26 saw): the count bound is reached first."""
    book, refused = fill_book(lambda tag: (tag + "-" + "x" * 93)[:93], lambda tag: f"{tag}-0123456789abcdef0")
    assert refused == ["too_many_active"] and len(book.active) == notice_book.MAX_ACTIVE
    size = payload(ipc.T_NOTICE, state_of(book, {}).encode())
    assert size <= notice_state.NOTICE_STATE_BUDGET


def test_the_recent_withdrawn_ids_are_the_newest_by_count_and_by_bytes():
    book = NoticeBook(node=NODE)
    for j in range(300):
        book.observe(Notice(f"w{j:03d}", "cancel", NODE, "", 0.0, 0.0, "sco"), float(j))
    assert book.recent_withdrawn() == {f"w{j:03d}" for j in range(300 - notice_state.RECENT_WITHDRAWN, 300)}
    long_ids = [worst(f"w{j}") for j in range(100)]
    kept = notice_state.recent(reversed(long_ids))
    assert kept == set(long_ids[len(long_ids) - len(kept):])
    assert wire.encoded_size(sorted(kept)) <= notice_state.RECENT_WITHDRAWN_BUDGET


def test_a_record_whose_notice_is_neither_active_nor_recently_withdrawn_is_gone():
    """How a restarted receiver (executor, verifier) still undoes a drain whose notice's cancel has
    been pushed out of the recent set: a notice leaves the active set only by being withdrawn."""
    book, _ = fill_book(worst)
    first_cancelled = worst("w0")
    state = notice_state.decode_notice_state(state_of(book, {}).encode(), NODE)
    assert first_cancelled not in state.withdrawn                     # long out of the recent set
    active = next(iter(state.active))
    heard = time.time()
    assert first_cancelled in state.gone({first_cancelled: heard, active: heard})
    assert active not in state.gone({first_cancelled: heard, active: heard})


def test_a_notice_heard_before_the_watchers_book_began_is_not_taken_for_withdrawn():
    """A watcher that lost notice.json starts a new book, which knows nothing of the notices before
    it: a drain of one of those is left as it is (a channel may bring the notice back), not undone."""
    began = time.time()
    state = notice_state.decode_notice_state(notice_state.NoticeState(active={}, book_since=began).encode(), NODE)
    assert state.book_since == began
    assert state.gone({"before": began - 60, "since": began + 1}) == {"since"}


def worst_record(i: int, now: float) -> DrainRecord:
    """A drain record at its largest: every pod of a big node left (its name at its longest), every
    socket client acked (its name at its longest), a scheduler memo of 10,000 pods, a long problem."""
    pods = [f"{'n' * 63}/{i:05d}{j:05d}" + "p" * 243 for j in range(800)]
    acks = {f"{worst(str(c), MAX_NAME)}:{c}": Ack("checkpointed", now + c) for c in range(1024)}
    return DrainRecord(kind="maintenance", received_at=now + i, budget=wire.Budget.of(BUILTIN.drain),
                       policy="drain", taint_key="t" * 253 + "/" + "k" * 63, state=DrainState.RUNNING,
                       steps={s: now for s in vars(Step).values() if isinstance(s, str) and not s.startswith("_")},
                       remaining=pods, phase="evict", acks=acks, contract_serial=2 ** 62,
                       memo={"evicted": {f"uid-{j}": p for j, p in enumerate(pods * 12)}},
                       problem=WIDE * 10000,
                       pods={p: PodFate("evicted", now + j, WIDE * 40) for j, p in enumerate(pods)})


def test_the_progress_message_at_its_worst_fits_and_carries_every_active_notice():
    """MAX_ACTIVE active notices and 1,000 past ones, every record at its largest: every active
    notice's record is carried (never with an empty ``remaining`` for a node that is not empty),
    and the message fits."""
    now = time.time()
    largest = [worst_record(i, now) for i in range(4)]   # the same few objects under many ids: cheaper
    records = {f"n{i}": largest[i % 4] for i in range(notice_book.MAX_ACTIVE + 1000)}
    active = {f"n{i}" for i in range(notice_book.MAX_ACTIVE)}
    body = progress.encode_progress(records, active)
    size = payload(ipc.T_PROGRESS, body)
    print(f"progress at its worst: {size} bytes")
    assert size <= progress.PROGRESS_BUDGET <= ipc.MAX_MESSAGE
    kept, refused = progress.decode_progress(body)
    assert refused == {} and active <= set(kept)
    assert all(kept[nid].remaining for nid in active)
    assert body["omitted"] == len(records) - len(kept)
    # The pods' fates: at most PODS_SENT per record, the rest counted (the verdict says how many).
    assert all(len(r.pods) + r.pods_cut == 800 and len(r.pods) <= progress.PODS_SENT for r in kept.values())


def test_a_record_sends_the_pod_fates_a_verdict_lists_first_and_counts_the_rest():
    now = time.time()
    fates = {f"ns/e{i:03d}": PodFate("evicted", now + i) for i in range(progress.PODS_SENT + 30)}
    fates["ns/keep"] = PodFate("skipped", now + 500)
    fates["ns/db"] = PodFate("deleted", now + 600, "pdb_blocked")
    rec = DrainRecord(kind="reclaim", received_at=now, budget=wire.Budget.of(BUILTIN.drain), policy="drain",
                      taint_key="sco.io/notice", remaining=[], pods=fates)
    kept, _ = progress.decode_progress(progress.encode_progress({"n1": rec}, {"n1"}))
    got = kept["n1"]
    assert len(got.pods) == progress.PODS_SENT and got.pods_cut == 32
    assert got.pods["ns/db"] == fates["ns/db"] and got.pods["ns/keep"] == fates["ns/keep"]   # never cut first
    assert "ns/e000" in got.pods and f"ns/e{progress.PODS_SENT + 29:03d}" not in got.pods    # the earliest evicted kept, the latest cut


def test_the_verdict_message_at_its_worst_fits():
    """The verifier's verdicts as news name only active notices: MAX_ACTIVE ids at their longest."""
    verdicts = {worst(f"v{i}"): VerdictRecord("volumes_attached", worst(f"v{i}"), time.time())
                for i in range(notice_book.MAX_ACTIVE)}
    size = payload(ipc.T_VERDICT, encode_verdict_news(verdicts, list(verdicts)))
    assert size <= ipc.MAX_MESSAGE


def test_a_small_progress_message_carries_records_whole_but_the_memo():
    now = time.time()
    rec = DrainRecord(kind="reclaim", received_at=now, budget=wire.Budget.of(BUILTIN.drain), policy="drain",
                      taint_key="sco.io/notice", steps={Step.CORDONED: now}, remaining=["default/app"],
                      acks={"w:1": Ack("checkpointed", now)}, memo={"evicted": {"uid-1": "default/app"}})
    past = {f"p{i}": DrainRecord(kind="reclaim", received_at=now - 100 - i, budget=rec.budget, policy="drain",
                                 taint_key="sco.io/notice", state=DrainState.DONE, remaining=[])
            for i in range(20)}
    body = progress.encode_progress({"n1": rec, **past}, {"n1"})
    kept, _ = progress.decode_progress(body)
    assert kept["n1"].remaining == ["default/app"] and kept["n1"].acks == rec.acks and kept["n1"].memo == {}
    # The newest past records, as many as PAST_SENT.
    assert set(kept) - {"n1"} == {f"p{i}" for i in range(progress.PAST_SENT)} and body["omitted"] == 20 - progress.PAST_SENT
    assert wire.encode_records({"n1": rec})["n1"]["evicted"] == {"uid-1": "default/app"}   # executor.json keeps it


def test_the_escalation_message_at_its_worst_fits():
    """The verifier's escalations name only active notices: MAX_ACTIVE ids at their longest."""
    levels = {worst(f"e{i}"): wire.Escalation(wire.FINAL, time.time()) for i in range(notice_book.MAX_ACTIVE)}
    size = payload(ipc.T_ESCALATE, wire.encode_escalations(levels))
    assert size <= ipc.MAX_MESSAGE
