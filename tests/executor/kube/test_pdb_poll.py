"""When the drain reads a PDB it waits on, once its namespace is no longer watched (pure): soon
after it closes, a pod under it leaves or its status moves; less often while nothing moves; never
a PDB nobody waits on."""
from __future__ import annotations

from executor.kube.pdb_poll import POLL_MAX_S, POLL_MIN_S, PdbPoll

MID = 0.5   # rand() = 0.5: every wait exactly as scheduled (jitter x1)


def test_a_pdb_is_read_poll_min_after_it_closes_and_not_before():
    poll = PdbPoll(lambda: MID)
    assert poll.due({"ns/web"}, 10.0) == []
    assert poll.due({"ns/web"}, 10.0 + POLL_MIN_S - 0.01) == []
    assert poll.next_moment() == 10.0 + POLL_MIN_S   # the drain's next turn at the latest
    assert poll.due({"ns/web"}, 10.0 + POLL_MIN_S) == ["ns/web"]
    assert PdbPoll(lambda: MID).next_moment() == float("inf")


def test_unchanged_reads_back_off_to_the_cap_and_a_new_version_comes_back_soon():
    poll = PdbPoll(lambda: MID)
    poll.due({"k"}, 0.0)
    now, waits = POLL_MIN_S, []
    for _ in range(6):
        assert poll.due({"k"}, now) == ["k"]
        poll.read("k", "7", now)
        waits.append(poll.next_at["k"] - now)
        now = poll.next_at["k"]
    # The first read is news (version 7 was never seen); then 1, 2, 4, 5 (the cap), 5.
    assert waits == [POLL_MIN_S, 1.0, 2.0, 4.0, POLL_MAX_S, POLL_MAX_S]
    poll.read("k", "8", now)
    assert poll.next_at["k"] - now == POLL_MIN_S


def test_a_failed_read_backs_off_like_an_unchanged_one():
    poll = PdbPoll(lambda: MID)
    poll.due({"k"}, 0.0)
    poll.read("k", None, 1.0)
    poll.read("k", None, 2.0)
    assert poll.next_at["k"] == 2.0 + 2.0


def test_a_pod_leaving_brings_the_reads_of_its_pdbs_only_to_within_poll_min_once():
    poll = PdbPoll(lambda: MID)
    poll.due({"a", "b"}, 0.0)
    for key in ("a", "b"):
        for t in (1.0, 2.0, 3.0):
            poll.read(key, "1", t)
    assert poll.next_at["a"] == poll.next_at["b"] == 3.0 + 2.0   # news at 1, then unchanged at 2 and 3
    poll.poke({"a", "elsewhere"}, 3.5)
    poll.poke({"a"}, 3.6)                      # a burst of departures: one read
    assert poll.due({"a", "b"}, 3.5 + POLL_MIN_S) == ["a"]
    assert "elsewhere" not in poll.next_at and poll.next_at["b"] == 5.0
    poll.read("a", "1", 4.0)
    assert poll.next_at["a"] == 4.0 + 2 * POLL_MIN_S   # its wait started again from POLL_MIN_S


def test_a_pdb_no_longer_waited_on_is_forgotten_and_starts_afresh():
    poll = PdbPoll(lambda: MID)
    poll.due({"a"}, 0.0)
    poll.read("a", "1", 1.0)
    poll.read("a", "1", 2.0)
    assert poll.due(set(), 100.0) == [] and poll.next_at == {}
    poll.read("a", "1", 100.0)   # an answer for a PDB nobody waits on any more: nothing scheduled
    assert poll.next_at == {}
    assert poll.due({"a"}, 100.0) == [] and poll.next_at["a"] == 100.0 + POLL_MIN_S


def test_the_jitter_spreads_a_hall_between_half_and_one_and_a_half_times_the_wait():
    low, high = PdbPoll(lambda: 0.0), PdbPoll(lambda: 0.999)
    low.due({"k"}, 0.0)
    high.due({"k"}, 0.0)
    assert low.next_at["k"] == POLL_MIN_S * 0.5
    assert 1.49 * POLL_MIN_S < high.next_at["k"] < 1.5 * POLL_MIN_S
