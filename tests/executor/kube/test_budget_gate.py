"""The PDB gate (pure): what the status read lets the drain send, and its own unconfirmed evictions."""
from __future__ import annotations

from typing import Any

from common.wire import PhaseEnds
from executor.kube.book_records import Inputs
from executor.kube.budget_gate import CLOSED, FREE, OPEN, TAKEN_MAX_S, BudgetGate, PdbView, PdbWatchView, status_of
from executor.kube.eviction_book import EvictionBook
from executor.kube.pod_state import Answer
from executor.kube.pod_view import RELIST
from tests.support.clocks import at


def pdb(name: str, allowed: int, *, disrupted: tuple[str, ...] = (), rv: str = "1", generation: int = 1,
        observed: int = 1, healthy: int = 5, desired: int = 5) -> dict[str, Any]:
    status: dict[str, Any] = {"disruptionsAllowed": allowed, "observedGeneration": observed,
                              "currentHealthy": healthy, "desiredHealthy": desired}
    if disrupted:
        status["disruptedPods"] = dict.fromkeys(disrupted, "2030-01-01T00:00:00Z")
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": name}}}, "status": status}


def pod(name: str, app: str = "web", *, ready: bool = True, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {"app": app}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def gate_with(*pdbs: dict[str, Any], now: float = 0.0) -> BudgetGate:
    view = PdbView()
    view.reset(list(pdbs), float("-inf"))
    gate = BudgetGate()
    gate.update(view.statuses(), now)
    return gate


def test_closed_while_the_budget_is_0_open_when_it_has_room():
    assert gate_with(pdb("web", 0)).verdict(("ns/web",), pod("a")) == CLOSED
    assert gate_with(pdb("web", 2)).verdict(("ns/web",), pod("a")) == OPEN


def test_a_status_behind_its_spec_is_closed_as_the_server_refuses_it():
    # eviction.go: observedGeneration < generation -> 429 "still being processed".
    assert gate_with(pdb("web", 3, generation=2, observed=1)).verdict(("ns/web",), pod("a")) == CLOSED


def test_pods_the_server_deletes_without_a_budget_go_at_once():
    gate = gate_with(pdb("web", 0, healthy=3, desired=2))
    assert gate.verdict((), pod("a")) == FREE                                  # under no PDB
    assert gate.verdict(("ns/web",), pod("a", phase="Pending")) == FREE        # canIgnorePDB
    assert gate.verdict(("ns/web",), pod("a", ready=False)) == FREE            # unready, budget healthy
    assert gate_with(pdb("web", 0, healthy=2, desired=2)).verdict(("ns/web",), pod("a", ready=False)) == FREE
    assert gate_with(pdb("web", 0, healthy=1, desired=2)).verdict(("ns/web",), pod("a", ready=False)) == CLOSED
    assert BudgetGate().verdict(("ns/web",), pod("a")) == FREE                 # no status known: the server decides


def test_every_pdb_selecting_the_pod_must_have_room():
    gate = gate_with(pdb("a", 1), pdb("b", 0))
    assert gate.verdict(("ns/a", "ns/b"), pod("x")) == CLOSED
    assert gate.verdict(("ns/a",), pod("x")) == OPEN


def test_an_accepted_eviction_counts_until_the_status_accounts_for_it():
    gate = gate_with(pdb("web", 2))
    gate.took(("ns/web",), pod("a"), 1.0)
    assert gate.room("ns/web") == 1
    gate.took(("ns/web",), pod("b"), 1.1)
    assert gate.verdict(("ns/web",), pod("c")) == CLOSED
    # The eviction's own status write lists the pod in disruptedPods: counted once, not twice.
    # (Read by GETs sent before either answer came: only what they list accounts for an eviction.)
    view = PdbView()
    view.reset([pdb("web", 2)], 0.5)
    view.saw(pdb("web", 1, disrupted=("a",), rv="2"), 0.9)
    gate.update(view.statuses(), 1.2)
    assert gate.room("ns/web") == 0 and set(gate.taken["ns/web"]) == {"b"}
    # The controller then drops "a" (terminating) and counts it unhealthy: still accounted for.
    view.saw(pdb("web", 0, disrupted=("b",), rv="3"), 0.9)
    view.saw(pdb("web", 1, rv="4", healthy=4), 0.9)
    gate.update(view.statuses(), 1.3)
    assert gate.taken == {} and gate.verdict(("ns/web",), pod("c")) == OPEN


def test_a_status_seen_before_the_answer_is_not_counted_again():
    view = PdbView()
    view.reset([pdb("web", 0, disrupted=("a",))], float("-inf"))
    gate = BudgetGate()
    gate.update(view.statuses(), 0.0)
    gate.took(("ns/web",), pod("a"), 0.0)
    assert gate.taken == {}


def test_an_eviction_stays_counted_while_what_is_read_predates_it_however_long():
    # Every status read meanwhile was sent before the eviction was accepted (a GET in flight across
    # it, answered late by a slow server): each predates the eviction's write and still shows the
    # room the eviction took. A wall-clock TTL of 30 s would count it as room.
    view = PdbView()
    view.reset([pdb("web", 1)], 5.0)
    gate = BudgetGate()
    gate.update(view.statuses(), 10.0)
    gate.took(("ns/web",), pod("a"), 10.0)
    for t in (20.0, 40.0, 50.0, 10.0 + TAKEN_MAX_S - 0.1):
        view.saw(pdb("web", 1, rv="2", healthy=5), 9.5)   # an older write
        gate.update(view.statuses(), t)
        assert gate.verdict(("ns/web",), pod("b")) == CLOSED, t
    # It arrives at last: the eviction's own write, listing the pod: counted by the server now.
    view.saw(pdb("web", 0, disrupted=("a",), rv="3"), 9.5)
    gate.update(view.statuses(), 10.0 + TAKEN_MAX_S - 0.1)
    assert gate.taken == {} and gate.room("ns/web") == 0


def test_a_read_sent_after_the_eviction_accounts_for_it_one_sent_before_does_not():
    # A read may skip the version listing the pod (the controller has since dropped it, the pod
    # terminating): a consistent GET or list sent after the answer shows the write or what followed it.
    gate = gate_with(pdb("web", 1))
    gate.took(("ns/web",), pod("a"), 10.0)
    view = PdbView()
    view.reset([pdb("web", 1)], 1.0)
    view.saw(pdb("web", 1, rv="2"), 9.9)                # sent before the answer: may predate the write
    gate.update(view.statuses(), 11.0)
    assert gate.room("ns/web") == 0
    view.saw(pdb("web", 1, rv="9", healthy=4), 10.5)
    gate.update(view.statuses(), 11.0)
    assert gate.taken == {} and gate.room("ns/web") == 1
    # A list sent after it does the same.
    gate.took(("ns/web",), pod("b"), 12.0)
    view.reset([pdb("web", 1, rv="8")], 11.9)
    gate.update(view.statuses(), 13.0)
    assert gate.room("ns/web") == 0
    view.reset([pdb("web", 1, rv="12", healthy=3)], 12.1)
    gate.update(view.statuses(), 13.0)
    assert gate.taken == {} and gate.room("ns/web") == 1


def test_an_eviction_the_status_never_catches_up_with_lapses_at_the_bound_on_the_monotonic_clock():
    gate = gate_with(pdb("web", 1))
    gate.took(("ns/web",), pod("a"), 10.0)
    gate.update(gate.statuses, 10.0 + TAKEN_MAX_S - 0.1)
    assert gate.verdict(("ns/web",), pod("b")) == CLOSED
    gate.update(gate.statuses, 10.0 + TAKEN_MAX_S)
    assert gate.verdict(("ns/web",), pod("b")) == OPEN
    # Without a clock given nothing lapses (the server's refusal still decides).
    gate.took(("ns/web",), pod("b"), None)
    gate.update(gate.statuses, 1e9)
    assert gate.verdict(("ns/web",), pod("c")) == CLOSED


def test_the_view_forgets_a_deleted_pdb_and_keeps_each_pdb_s_latest_read():
    view = PdbView()
    view.reset([pdb("web", 1), pdb("db", 0)], 1.0)
    view.drop("ns/db")
    assert set(view.statuses()) == {"ns/web"}
    view.saw(pdb("web", 2, rv="3"), 5.0)
    view.saw(pdb("web", 1, rv="2", disrupted=("x",)), 4.0)   # an older read answered late
    assert view.statuses()["ns/web"].read_at == 5.0 and view.statuses()["ns/web"].allowed == 2
    assert view.statuses()["ns/web"].accounted == {"x"}   # what it lists still counts
    assert status_of(pdb("web", 3)).allowed == 3


def _book() -> EvictionBook:
    return EvictionBook(PhaseEnds(0.0, 100.0, 110.0), 0.0, "report")


def test_the_book_sends_nothing_while_closed_and_one_at_a_time_within_the_room():
    pods = [pod(f"w{i}") for i in range(3)] + [pod("solo", app="none")]
    pdbs = [pdb("web", 0)]
    view = PdbView()
    view.reset(pdbs, 0.0)
    book = _book()
    book.observe(pods, pdbs, at(1.0), view.statuses())
    actions, _ = book.next_actions(at(1.0), Inputs(), 8)
    assert [a.key for a in actions] == ["ns/solo"]          # not under the PDB: at once
    book.answer("u-solo", Answer("accepted"), at(1.1))
    assert book.next_actions(at(1.2), Inputs(), 8)[0] == []
    view.saw(pdb("web", 1, rv="2"), 1.25)
    book.observe(pods[:3], pdbs, at(1.3), view.statuses())
    (a,) = book.next_actions(at(1.3), Inputs(), 8)[0]
    book.answer(a.uid, Answer("accepted"), at(1.4))
    # Room was 1 and this drain took it: no second eviction until the status says more.
    assert book.next_actions(at(1.5), Inputs(), 8)[0] == []


def test_the_plan_is_redone_when_a_pod_or_a_pdb_spec_changes_not_when_only_a_status_does():
    pods = [pod("a"), pod("b", app="db")]
    for p in pods:
        p["metadata"]["resourceVersion"] = "1"
    book = _book()
    book.observe(pods, [pdb("web", 1)], at(1.0))
    plan = book.plan
    book.observe(pods, [pdb("web", 0, rv="7")], at(1.1))          # only the status moved
    assert book.plan is plan
    moved = [dict(pods[0], metadata={**pods[0]["metadata"], "resourceVersion": "2",
                                     "deletionTimestamp": "2030-01-01T00:00:00Z"}), pods[1]]
    book.observe(moved, [pdb("web", 0, rv="7")], at(1.2))
    assert book.plan is not plan and book.plan.targets["u-a"].terminating
    # A PDB whose spec changed (new generation) selecting "db" too: matched again, not from memory.
    wider = pdb("web", 0, rv="8", generation=2, observed=2)
    wider["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    book.observe(moved, [wider], at(1.3))
    assert book.plan.targets["u-b"].pdbs == ("ns/web",)


def test_a_pdb_of_the_wrong_shape_reads_as_no_room_known_never_an_exception():
    for garbage in ({"metadata": [], "status": "x"}, {"status": {"disruptionsAllowed": "9", "disruptedPods": 5}},
                    {"status": {"disruptedPods": ["a"], "observedGeneration": None}}, {}):
        st = status_of(garbage)
        assert st.allowed == 0 and st.accounted == frozenset()
    view = PdbView()
    view.reset([{"metadata": {"namespace": "ns", "name": "a"}, "status": {"disruptedPods": 7}}], 0.0)
    gate = BudgetGate()
    gate.update(view.statuses(), now=0.0)
    assert gate.verdict(("ns/a",), pod("x")) == CLOSED


def test_the_book_says_which_pdbs_a_pod_left_and_which_hold_back_a_pod_to_move():
    pods = [pod("w0"), pod("w1"), pod("d0", app="db")]
    pdbs = [pdb("web", 1), pdb("db", 0)]
    view = PdbView()
    view.reset(pdbs, 0.0)
    book = _book()
    book.observe(pods, pdbs, at(1.0), view.statuses())
    assert book.waited_on() == {"ns/db"}          # web has room, db none
    (a,) = book.next_actions(at(1.0), Inputs(), 8)[0]
    book.answer(a.uid, Answer("accepted"), at(1.1))
    book.observe(pods, pdbs, at(1.2), view.statuses())
    assert book.waited_on() == {"ns/db", "ns/web"}   # web's one room taken by this drain
    assert book.take_left_under() == set()
    gone = a.uid.removeprefix("u-")
    book.observe([p for p in pods if p["metadata"]["name"] != gone], pdbs, at(1.3), view.statuses())
    assert book.take_left_under() == {"ns/web"} and book.take_left_under() == set()


def test_the_watched_view_keeps_its_list_s_read_time_and_takes_each_event_as_a_newer_version():
    watched = PdbWatchView()
    watched.listed_at = 5.0                   # drain_io sets it before the reset
    watched.reset([pdb("web", 1), pdb("db", 0)], "1")
    assert watched.apply({"type": "MODIFIED", "object": pdb("web", 0, disrupted=("a",), rv="2")}) != RELIST
    assert watched.apply({"type": "DELETED", "object": pdb("db", 0, rv="3")}) != RELIST
    st = watched.pdbs.statuses()
    assert set(st) == {"ns/web"} and watched.resource_version == "3"
    assert st["ns/web"].allowed == 0 and st["ns/web"].accounted == {"a"} and st["ns/web"].read_at == 5.0
    assert watched.apply({"type": "ERROR", "object": {"kind": "Status", "code": 410}}) == RELIST
