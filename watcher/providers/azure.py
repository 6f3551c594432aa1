"""Azure Instance Metadata Service: Scheduled Events.

``GET /metadata/scheduledevents?api-version=2020-07-01`` (header ``Metadata:
true``) lists the events of the whole placement group; ours name this VM in
``Resources`` (the VM name from ``/metadata/instance/compute/name``, or the
configured node name). What each EventType means is Microsoft's ("Azure Metadata
Service: Scheduled Events for Linux VMs",
https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events):
``Preempt`` (the Spot VM is being deleted) and ``Terminate`` (the VM is scheduled to be
deleted) -> ``reclaim``; ``Reboot`` (the VM is rebooted, non-persistent memory is lost)
and ``Redeploy`` (the VM moves to another node, ephemeral disks are lost) ->
``maintenance``, which the contract drains; ``Freeze`` ("scheduled to pause for a few
seconds ... no impact on memory or open files") -> ``pause``, which the built-in
contract ignores. The deadline is
``NotBefore`` (RFC 1123); a Started event has none, so its deadline is the
one its notice got while Scheduled, or first sight.

Azure has no Completed status: an event just disappears. Gone while still
Scheduled -> withdrawn (cancelled). Gone after it Started -> a maintenance is
over (withdrawn: undo the cordon, the VM is still ours); a reclaim is not (the
VM is going).

When our drain is done, the event is acknowledged (``POST {"StartRequests":
[{"EventId": ...}]}``) so the platform may proceed early -- once per event,
only while it is still Scheduled, and only when its ``Resources`` is this VM
alone. The same page: "Acknowledging an event allows the event to proceed for
all Resources in the event, not just the VM that acknowledges the event." An
event shared with other VMs is never acknowledged by this agent (the others may
still be draining); ``drained`` returns it as ``Withheld`` (reason
``shared_event``, the other VMs named) and the watcher says so
(``notice.ack_withheld``), once per event. The platform then proceeds at
``NotBefore``, as if no VM had acknowledged.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import ujson

from common.config import Config
from common.http import HttpClient
from common.notice import Notice, notice_time
from common.timefmt import parse_gmt
from watcher.providers import BaseSource, MetadataError, PollResult, Wake, Withheld

API_VERSION = "2020-07-01"
EVENTS_PATH = f"/metadata/scheduledevents?api-version={API_VERSION}"
NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
HEADERS = {"Metadata": "true"}
KINDS = {"Preempt": "reclaim", "Terminate": "reclaim",
         "Reboot": "maintenance", "Redeploy": "maintenance", "Freeze": "pause"}
MAX_EVENTS = 100
MAX_RESOURCES = 1000
NAMED_OTHERS = 10   # of a shared event's other VMs, this many are named in the event
# Event ids are GUIDs; anything else in an id we build a notice id from is refused.
_EVENT_ID = re.compile(r"^[A-Za-z0-9\-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    event_type: str
    status: str                  # Scheduled | Started
    not_before: float | None     # None once Started
    resources: tuple[str, ...]


def notice_id(event_id: str) -> str:
    return f"azure-{event_id}"


def parse_events(body: bytes) -> tuple[list[Event], list[MetadataError]]:
    """The Scheduled Events document -> its events (ours or not) and the events refused.

    One malformed or unknown event is refused on its own: it must not hide a
    Preempt listed next to it.
    """
    try:
        doc = ujson.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataError("bad_body", f"scheduledevents: {e}") from None
    events = doc.get("Events") if isinstance(doc, dict) else None
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise MetadataError("bad_body", "scheduledevents: Events must be a list of at most 100")
    good, bad = [], []
    for raw in events:
        try:
            good.append(_event(raw))
        except MetadataError as e:
            bad.append(e)
    return good, bad


def _event(raw: object) -> Event:
    if not isinstance(raw, dict):
        raise MetadataError("bad_body", "scheduledevents: an event is not an object")
    event_id, event_type, status = raw.get("EventId"), raw.get("EventType"), raw.get("EventStatus")
    if not isinstance(event_id, str) or not _EVENT_ID.match(event_id):
        raise MetadataError("bad_body", "scheduledevents: EventId is not a GUID")
    if event_type not in KINDS:
        raise MetadataError("bad_body", f"scheduledevents: unknown EventType {str(event_type)[:32]!r}")
    if status not in ("Scheduled", "Started"):
        raise MetadataError("bad_body", f"scheduledevents: unknown EventStatus {str(status)[:32]!r}")
    resources = raw.get("Resources")
    if (not isinstance(resources, list) or len(resources) > MAX_RESOURCES
            or not all(isinstance(r, str) for r in resources)):
        raise MetadataError("bad_body", "scheduledevents: Resources must be a list of names")
    not_before_text = raw.get("NotBefore") or ""
    not_before = None
    if not_before_text:
        try:
            not_before = notice_time(parse_gmt(not_before_text), "NotBefore")
        except ValueError as e:
            raise MetadataError("bad_body", f"scheduledevents NotBefore: {e}") from None
    elif status == "Scheduled":
        raise MetadataError("bad_body", "scheduledevents: a Scheduled event without NotBefore")
    return Event(event_id, event_type, status, not_before, tuple(resources))


def event_notice(event: Event, node: str, first_seen: float) -> Notice:
    """Our notice for one event, first seen at ``first_seen``."""
    # First seen already Started (no NotBefore): the platform is under way.
    deadline = event.not_before if event.not_before is not None else first_seen
    return Notice(
        id=notice_id(event.event_id), kind=KINDS[event.event_type], node=node, instance_id="",
        issued_at=min(first_seen, deadline), deadline=deadline, source="azure", channel="metadata",
        received_at=first_seen, detail=event.event_type,
    )


class Source(BaseSource):
    name = "azure"

    def __init__(self, config: Config, http: HttpClient | None = None, wake: Wake | None = None) -> None:
        super().__init__(config, http, wake)
        self.vm_name = ""
        self.held: dict[str, Notice] = {}      # event id -> our notice
        self.status: dict[str, str] = {}       # event id -> last status seen
        self.resources: dict[str, tuple[str, ...]] = {}   # event id -> its Resources, last seen
        self.acked: set[str] = set()
        self.withheld: set[str] = set()        # shared events whose acknowledgement was withheld

    def resume(self, active: Iterable[Notice]) -> None:
        for n in self.own(active):
            event_id = n.id.removeprefix("azure-")
            self.held[event_id] = n
            self.status[event_id] = "Scheduled"

    def poll(self, now: float) -> PollResult:
        if not self.vm_name:
            body = self.fetch("GET", NAME_PATH, headers=HEADERS) or b""
            self.vm_name = body.decode("utf-8", "replace").strip()[:256]
        events, refused = parse_events(self.fetch("GET", EVENTS_PATH, headers=HEADERS) or b"")
        ours = [e for e in events if set(e.resources) & {self.vm_name, self.node} - {""}]
        result = PollResult(errors=refused)
        present = set()
        for event in ours:
            present.add(event.event_id)
            # The first notice stands (the book keeps the first arrival anyway).
            notice = self.held.get(event.event_id) or event_notice(event, self.node, now)
            self.held[event.event_id] = notice
            self.status[event.event_id] = event.status
            self.resources[event.event_id] = event.resources
            result.notices.append(notice)
        # With an event refused this round we cannot tell "gone" from "unreadable": wait.
        gone = [] if refused else [i for i in self.held if i not in present]
        for event_id in gone:
            notice = self.held.pop(event_id)
            started = self.status.pop(event_id, "Scheduled") == "Started"
            if not started or notice.kind != "reclaim":
                result.withdrawn.append(notice.id)
            self.acked.discard(event_id)
            self.withheld.discard(event_id)
            self.resources.pop(event_id, None)
        return result

    def drained(self, notice_ids: list[str], now: float) -> list[Withheld]:
        """Acknowledge our Scheduled events among ``notice_ids``, each once, if this VM is all
        their ``Resources``; the shared ones are returned as withheld (each once). Raises
        MetadataError if the acknowledgement failed, or if an event's Resources are not known
        yet (a poll failed since a restart): the drains are then reported again next round."""
        due = [i.removeprefix("azure-") for i in notice_ids if i.startswith("azure-")]
        due = [i for i in due if self.status.get(i) == "Scheduled" and i not in self.acked]
        unknown = [i for i in due if i not in self.resources]
        if unknown:
            raise MetadataError("unknown_resources", f"scheduledevents: {unknown[0]} not read since start")
        withheld: list[Withheld] = []
        alone: list[str] = []
        for event_id in due:
            others = self._others(self.resources[event_id])
            if not others:
                alone.append(event_id)
            elif event_id not in self.withheld:
                self.withheld.add(event_id)
                withheld.append(Withheld(
                    notice_id(event_id), "shared_event",
                    f"acknowledging event {event_id} would let it proceed for all {len(others) + 1} VMs "
                    "in its Resources, not just this one (Azure Scheduled Events)", tuple(others[:NAMED_OTHERS])))
        if alone:
            body = ujson.dumps({"StartRequests": [{"EventId": i} for i in alone]}).encode()
            self.fetch("POST", EVENTS_PATH, headers={**HEADERS, "Content-Type": "application/json"}, body=body)
            self.acked.update(alone)
        return withheld

    def _others(self, resources: tuple[str, ...]) -> list[str]:
        """The VMs other than this one an event names (this VM: its compute name or node name)."""
        me = {self.vm_name, self.node} - {""}
        return sorted({r[:256] for r in resources} - me)
