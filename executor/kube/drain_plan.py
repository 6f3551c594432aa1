"""The drain plan (pure): which pods must move, in what order, and which may move together.

``drain_plan(pods, pdbs)`` turns one listing of the node into tiers of lanes:

- Only pods that count move (``pod_filters``: not mirror, not DaemonSet, not finished),
  and each as its own policy says (``common.pod_policy``, given the drain's ``Rules``): a
  skipped pod is left out of the plan (``Plan.skipped``), a held one stays a target that is
  not sent before its ``hold_until``.
- Tier 0 is every ordinary pod, tier 1 the system-critical ones
  (``system-cluster-critical`` / ``system-node-critical`` or priority >= 2e9), as
  kubelet's graceful node shutdown does: the node's own plumbing goes last.
- A lane is the pods under one PodDisruptionBudget: their evictions run one at
  a time, because parallel evictions under one PDB collide on its status and the
  server retries each collision in 500 ms steps (measured: 1.6 s instead of 0.58 s
  for 110 pods). Pods under different PDBs, and pods under none, each get their
  own lane and run in parallel (the adapter caps the workers).
- When PDBs cannot be read (an identity without that permission), the pods of
  one controller (ownerReference) share a lane instead: that is what a PDB
  usually covers, and a wrong guess only costs speed -- the server still
  enforces every budget.

``grace_for`` puts the contract's clock on it (the phase ends themselves are
``common.wire.phase_ends``, the verifier's too): the grace period an eviction may
ask for; ``ApiHealth`` and ``down_after`` decide when the API server counts as down,
and ``fallback_due`` whether the drain may go around it now; ``dry_run_steps`` is the
plan a dry run spools instead of acting.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common import pod_policy
from common.clock import Moment, MonoTime
from common.events import EventType
from common.timefmt import format_rfc3339
from common.wire import Phase, PhaseEnds
from executor.kube.pod_filters import pod_key, pod_verdict

CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
CRITICAL_PRIORITY = 2_000_000_000   # both system classes are at or above this
DEFAULT_GRACE_S = 30                # the API's default terminationGracePeriodSeconds
DOWN_AFTER_CALLS = 3                # unanswered calls in a row before the API server counts as down
DOWN_AFTER_MAX_S = 10.0
_PDB_CAUSE = re.compile(r"disruption budget (\S+)")


@dataclass(frozen=True, slots=True)
class Target:
    """One pod that must leave the node."""

    uid: str
    key: str             # namespace/name
    tier: int            # 0 ordinary, 1 system-critical
    priority: int
    lane: str            # "pdb:ns/name" | "owner:uid" | "pod:ns/name"
    pdb: str             # "ns/name" of the PDB the plan believes covers it, "" if none or unknown
    pdbs: tuple[str, ...]   # every PDB selecting it ("ns/name"; more than one: the server answers 500)
    grace_s: int         # the pod's own terminationGracePeriodSeconds
    terminating: bool    # already being deleted (by us earlier, or by anyone)
    pod: dict[str, Any] = field(compare=False, repr=False)
    hold_until: float = 0.0          # its own policy keeps it until then (epoch; inf: this drain never sends it)
    policy: str = ""                 # why it is held, or "" (common.pod_policy.Decision.reason)
    lost: tuple[str, ...] = ()       # what evicting it loses for good (a reclaim's emptyDir, no controller)


@dataclass(frozen=True, slots=True)
class Lane:
    key: str
    tier: int
    uids: tuple[str, ...]    # in eviction order


@dataclass(frozen=True, slots=True)
class Plan:
    targets: dict[str, Target]   # by uid
    lanes: tuple[Lane, ...]      # in order: tier, then lowest priority, then key
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)   # uid -> (ns/name, reason): left, uncounted

    def order(self) -> list[str]:
        """Every target uid in plan order."""
        return [uid for lane in self.lanes for uid in lane.uids]


EMPTY_PLAN = Plan({}, ())


def grace_for(own_grace_s: int, now: float, cutoff: float) -> int | None:
    """The gracePeriodSeconds to send: None (the pod's own) when that ends before the cutoff,
    else what is left until the cutoff, at least 1 -- 0 would be a forced delete that skips
    the kubelet's graceful stop altogether."""
    left = int(cutoff - now)
    if own_grace_s <= left:
        return None
    return max(1, left)


def down_after(evict_s: float) -> float:
    """How long the API server may stay silent before the drain goes around it: at most a quarter
    of the contract's evict phase (so the fallback still has most of it), never over 10 s."""
    return max(0.5, min(DOWN_AFTER_MAX_S, evict_s / 4))


def next_turn(now: Moment, idle_s: float, ends: PhaseEnds, linger_until: float) -> MonoTime:
    """When (monotonic) the drain plans again at the latest if nothing wakes it: ``idle_s`` from
    now, or the next phase end (wall clock) before that (time alone moves the book only there); a
    phase end a wall clock stepped ahead brought nearer is seen within ``idle_s``. The watches wake
    it on every change; replanning every 0.25 s regardless was most of an idle agent's CPU."""
    ends_ahead = [t - now.wall for t in (ends.checkpoint_by, ends.evict_at, ends.cutoff, linger_until) if t > now.wall]
    return MonoTime(now.mono + min([idle_s, *ends_ahead]))


def fallback_due(*, down: bool, allowed: bool, dry_run: bool, done: bool, now: float, at: float) -> bool:
    """Go around the API server now? Only when it is down, the contract lets this notice's kind
    do it, this is no dry run, it has not been done for this notice, and it is as late as still
    leaves the local mechanism its lead time (``at``: ``common.wire.fallback_at``) -- a short
    outage early in the window only waits."""
    return down and allowed and not dry_run and not done and now >= at


def dry_run_steps(pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None, now: float,  # noqa: PLR0913 -- the plan's inputs, each plain data
                  ends: PhaseEnds, held: frozenset[str], hold_all: bool, *,
                  rules: pod_policy.Rules | None = None) -> list[dict[str, Any]]:
    """Each pod the drain would move, in plan order, with the grace it would ask for and the phase
    it would leave in: at once (evict), or once its checkpointing client lets go (checkpoint);
    a pod its own policy holds says so (``policy``, ``until``), one it skips is listed last with
    ``skipped`` and its reason (``rules``: the drain's, common.pod_policy)."""
    plan = drain_plan(pods, pdbs, rules=rules)
    out = []
    for uid in plan.order():
        t = plan.targets[uid]
        waits = hold_all or uid in held
        sent = max(now, ends.checkpoint_by, t.hold_until) if waits else max(now, t.hold_until)
        step = {"pod": t.key, "uid": uid, "tier": t.tier, "lane": t.lane, "pdb": t.pdb,
                "phase": Phase.CHECKPOINT if waits else Phase.EVICT,
                "grace_s": (grace_for(t.grace_s, sent, ends.cutoff) or t.grace_s) if sent != float("inf") else None}
        if t.policy:
            step.update(policy=t.policy, until=None if t.hold_until == float("inf") else format_rfc3339(t.hold_until))
        out.append(step)
    out += [{"pod": key, "uid": uid, "skipped": reason} for uid, (key, reason) in plan.skipped.items()]
    return out


def must_leave_under(rules: pod_policy.Rules | None) -> Callable[[list[dict[str, Any]]], bool]:
    """Does anything the drain has to move remain among these pods: a pod that counts and that its
    own policy does not have this drain skip (what "empty" means for this drain)."""
    def must_leave(pods: list[dict[str, Any]]) -> bool:
        # Lazily: the first pod that must leave answers (this runs every turn of the drain).
        return any(rules is None or pod_policy.decide(p, rules).action != pod_policy.SKIP
                   for p in pods if pod_verdict(p).counts)
    return must_leave


def policy_events(plan: Plan, said: set[str], extended: Mapping[str, float] | None = None,
                  ) -> list[tuple[EventType, dict[str, Any]]]:
    """(event type, data) for each pod whose own policy, or what it would lose, the drain has not
    said yet (``said``: the uids already said, updated): ``drain.pod_skipped`` (left in place,
    not counted), ``drain.pod_held`` (not sent before ``until``, still counted; reason "extended"
    for a pod whose workload was granted more time, ``extended``: uid -> until), and
    ``drain.pod_data_lost`` (evicted on a reclaim although its emptyDir data, or the pod itself,
    cannot come back)."""
    out: list[tuple[EventType, dict[str, Any]]] = []
    for uid, (key, reason) in plan.skipped.items():
        if uid not in said:
            said.add(uid)
            out.append(("drain.pod_skipped", {"pod": key, "uid": uid, "reason": reason}))
    for uid, t in plan.targets.items():
        if uid in said or not (t.policy or t.lost):
            continue
        said.add(uid)
        if t.policy:
            until = None if t.hold_until == float("inf") else format_rfc3339(t.hold_until)
            out.append(("drain.pod_held", {"pod": t.key, "uid": uid, "reason": t.policy, "until": until,
                                           "lost": list(t.lost)}))
        else:
            out.append(("drain.pod_data_lost", {"pod": t.key, "uid": uid, "lost": list(t.lost)}))
    # A pod whose workload was granted more time (``extended``: uid -> until), once each.
    for uid, held_until in (extended or {}).items():
        target = plan.targets.get(uid)
        if target is not None and f"extended:{uid}" not in said:
            said.add(f"extended:{uid}")
            out.append(("drain.pod_held", {"pod": target.key, "uid": uid, "reason": "extended",
                                           "until": format_rfc3339(held_until), "lost": []}))
    return out


@dataclass(slots=True)
class ApiHealth:
    """Consecutive unanswered calls, and since when (pure bookkeeping, clock passed in: the
    monotonic one -- "down for ``down_after_s``" is an interval, which a wall clock stepped ahead
    would end at once, sending the drain around a server that is merely slow)."""

    streak: int = 0
    since: float | None = None

    def ok(self) -> None:
        self.streak, self.since = 0, None

    def failed(self, now: float) -> None:
        self.streak += 1
        if self.since is None:
            self.since = now

    def down(self, now: float, down_after_s: float) -> bool:
        return self.streak >= DOWN_AFTER_CALLS and self.since is not None and now - self.since >= down_after_s


def pdb_from_causes(causes: tuple[str, ...] | list[str]) -> str:
    """The PDB named by a 429's causes ("The disruption budget web needs 2 healthy pods ..."), or ""."""
    for cause in causes:
        m = _PDB_CAUSE.search(cause)
        if m:
            return m.group(1)
    return ""


# -- classification -------------------------------------------------------------------------
def priority_of(pod: dict[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def tier_of(pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    critical = spec.get("priorityClassName") in CRITICAL_CLASSES or priority_of(pod) >= CRITICAL_PRIORITY
    return 1 if critical else 0


def own_grace(pod: dict[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_GRACE_S


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False   # an operator we do not know: assume no match (planning only)


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A LabelSelector. An empty one is taken to match every pod of the namespace (policy/v1);
    v1beta1 matched none, but for planning, grouping too much only costs speed."""
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    return all(isinstance(e, dict) and _expression_matches(e, labels)
               for e in selector.get("matchExpressions") or [])


def covering_pdbs(pod: dict[str, Any], pdbs: list[dict[str, Any]]) -> tuple[str, ...]:
    """ "ns/name" of every PDB selecting the pod, by name. (More than one: the server refuses the
    eviction with 500, and the pod ends up escalated at the cutoff.)"""
    md = pod.get("metadata") or {}
    ns, labels = md.get("namespace"), md.get("labels") or {}
    names = sorted(str((p.get("metadata") or {}).get("name")) for p in pdbs
                   if (p.get("metadata") or {}).get("namespace") == ns
                   and selector_matches((p.get("spec") or {}).get("selector"), labels))
    return tuple(f"{ns}/{name}" for name in names)


def covering_pdb(pod: dict[str, Any], pdbs: list[dict[str, Any]]) -> str:
    """ "ns/name" of the first (by name) PDB selecting the pod, or "" (``covering_pdbs``)."""
    return (covering_pdbs(pod, pdbs) or ("",))[0]


def _controller_uid(pod: dict[str, Any]) -> str:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return ""


Covering = dict[tuple[Any, ...], tuple[str, ...]]


def target_of(pod: dict[str, Any], pdbs: list[dict[str, Any]] | None, covering: Covering | None = None) -> Target:
    """``covering``: PDBs by (namespace, labels), for these same ``pdbs`` (the pods of one workload
    share their labels, so a replan matches each selector once per workload, not once per pod)."""
    md = pod.get("metadata") or {}
    key = pod_key(pod)
    every: tuple[str, ...] = ()
    if pdbs is not None:
        labels = md.get("labels")
        seen = (md.get("namespace"), tuple(sorted(labels.items())) if isinstance(labels, dict) else ())
        if covering is None or seen not in covering:
            every = covering_pdbs(pod, pdbs)
            if covering is not None:
                covering[seen] = every
        else:
            every = covering[seen]
    pdb = every[0] if every else ""
    if pdb:
        lane = f"pdb:{pdb}"
    elif pdbs is None and _controller_uid(pod):
        lane = f"owner:{_controller_uid(pod)}"
    else:
        lane = f"pod:{key}"
    return Target(uid=str(md.get("uid") or key), key=key, tier=tier_of(pod), priority=priority_of(pod),
                  lane=lane, pdb=pdb, pdbs=every, grace_s=own_grace(pod), terminating=bool(md.get("deletionTimestamp")),
                  pod=pod)


def _object_version(obj: dict[str, Any], field: str) -> tuple[Any, ...]:
    md = obj.get("metadata") or {}
    return md.get("uid"), md.get("namespace"), md.get("name"), md.get(field), md.get("deletionTimestamp")


def pdbs_key(pdbs: list[dict[str, Any]] | None) -> tuple[Any, ...] | None:
    return None if pdbs is None else tuple(_object_version(p, "generation") for p in pdbs)


def plan_key(pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None) -> tuple[Any, ...]:
    """What the plan depends on: every pod's version, and every PDB's spec version (not its status)."""
    return tuple(_object_version(p, "resourceVersion") for p in pods), pdbs_key(pdbs)


PodMemo = dict[tuple[Any, ...], "Target | tuple[str, str] | None"]
_UNSEEN = object()


def _version(pod: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a pod's place in the plan depends on, if the server versioned it (else: judged afresh)."""
    md = pod.get("metadata") or {}
    rv = md.get("resourceVersion")
    if not (isinstance(rv, str) and rv):
        return None
    return md.get("uid"), md.get("namespace"), md.get("name"), rv, md.get("deletionTimestamp")


def _judged(pod: dict[str, Any], pdbs: list[dict[str, Any]] | None, covering: Covering | None,
            rules: pod_policy.Rules | None) -> Target | tuple[str, str] | None:
    """The pod's target; (key, reason) if its own policy skips it; None if it does not count."""
    if not pod_verdict(pod).counts:
        return None
    t = target_of(pod, pdbs, covering)
    if rules is None:
        return t
    d = pod_policy.decide(pod, rules)
    if d.action == pod_policy.SKIP:
        return t.key, d.reason
    return dataclasses.replace(t, hold_until=d.until if d.action == pod_policy.HOLD else 0.0,
                               policy=d.reason, lost=d.lost)


def drain_plan(pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None,
               covering: Covering | None = None, rules: pod_policy.Rules | None = None,
               memo: PodMemo | None = None) -> Plan:
    """Tiers of lanes over the pods that count. ``pdbs`` None: they could not be read.
    ``covering``: see ``target_of`` (kept by the caller for as long as ``pdbs`` stay the same).
    ``rules``: the drain's, for each pod's own policy (None: every pod moves). ``memo``: each
    pod version's judgement, kept by the caller for as long as ``pdbs`` and ``rules`` stay the
    same (a replan judges again only the pods that changed); left holding the pods given."""
    targets: dict[str, Target] = {}
    skipped: dict[str, tuple[str, str]] = {}
    kept: PodMemo = {}
    for p in pods:
        version = _version(p) if memo is not None else None
        judged: Any = _UNSEEN if version is None or memo is None else memo.get(version, _UNSEEN)
        if judged is _UNSEEN:
            judged = _judged(p, pdbs, covering, rules)
        if version is not None:
            kept[version] = judged
        if isinstance(judged, Target):
            targets[judged.uid] = judged
        elif judged is not None:
            md = p.get("metadata") or {}
            skipped[str(md.get("uid") or pod_key(p))] = judged
    if memo is not None:
        memo.clear()
        memo.update(kept)
    grouped: dict[tuple[int, str], list[Target]] = {}
    for t in targets.values():
        grouped.setdefault((t.tier, t.lane), []).append(t)
    lanes = []
    for (tier, key), members in grouped.items():
        members.sort(key=lambda t: (t.priority, t.key))
        lanes.append((tier, members[0].priority, key, Lane(key, tier, tuple(t.uid for t in members))))
    lanes.sort(key=lambda x: x[:3])
    return Plan(targets, tuple(lane for *_, lane in lanes), skipped)
