"""GCP Compute Engine metadata: preemption and host maintenance.

- ``instance/preempted``: ``TRUE`` once the VM is marked for preemption ->
  ``reclaim``; the VM gets 30 s (ACPI soft-off, then hard-off), counted from
  when we first saw it.
- ``instance/maintenance-event``, ~60 s from first sight; back to ``NONE`` ->
  withdrawn. What each value means is Google's ("Getting live migration notices",
  https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice, and
  "About host events", https://cloud.google.com/compute/docs/instances/host-maintenance-overview):
  ``MIGRATE_ON_HOST_MAINTENANCE``: the VM is live-migrated to another host and keeps
  running (memory, disks, network; a brief blackout) -> ``live_migration``, which the
  built-in contract ignores: draining would do more harm than the migration.
  ``TERMINATE_ON_HOST_MAINTENANCE``: the VM is stopped (and maybe restarted
  elsewhere) -> ``maintenance``, which the contract drains.

Every request carries ``Metadata-Flavor: Google``. To hear a change at once,
one thread per key long-polls ``?wait_for_change=true&last_etag=E`` (with a
timeout, so a lost connection is noticed) and wakes the watcher, whose next
``poll`` reads the keys. The plain poll every interval is the floor: if the
long-poll is broken, nothing is heard later than one interval. When a plain
read fails while a long-poll is parked on a known value, that value is
current by construction (the server would have answered a change) and is used.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from urllib.parse import quote

from common.config import Config
from common.http import HttpClient, HttpError
from common.notice import Notice, derived_id
from common.supervise import Crash, Supervised
from watcher.providers import BaseSource, MetadataError, PollResult, Wake, http_reason, run_checks

PREFIX = "/computeMetadata/v1/"
PREEMPTED = "instance/preempted"
MAINTENANCE = "instance/maintenance-event"
INSTANCE_ID = "instance/id"
FLAVOR = {"Metadata-Flavor": "Google"}
PREEMPT_GRACE_S = 30.0
MAINTENANCE_LEAD_S = 60.0
# maintenance-event value -> notice kind (see the module docstring for Google's words).
MAINTENANCE_KINDS = {"MIGRATE_ON_HOST_MAINTENANCE": "live_migration", "TERMINATE_ON_HOST_MAINTENANCE": "maintenance"}
MAINTENANCE_EVENTS = tuple(MAINTENANCE_KINDS)
LONG_POLL_S = 60          # the server answers unchanged after this; the thread asks again
RETRY_MAX_S = 5.0
_ETAG = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")


def parse_preempted(text: str) -> bool:
    value = text.strip()
    if value not in ("TRUE", "FALSE"):
        raise MetadataError("bad_body", f"preempted: {value[:32]!r}")
    return value == "TRUE"


def parse_maintenance_event(text: str) -> str:
    value = text.strip()
    if value != "NONE" and value not in MAINTENANCE_EVENTS:
        raise MetadataError("bad_body", f"maintenance-event: {value[:64]!r}")
    return value


def preemption_notice(node: str, instance_id: str, first_seen: float) -> Notice:
    # One preemption per boot: the id needs no time, so a restarted watcher finds the same notice.
    return Notice(
        id=derived_id("gcp", instance_id, "reclaim", "preempted"), kind="reclaim", node=node,
        instance_id=instance_id, issued_at=first_seen, deadline=first_seen + PREEMPT_GRACE_S,
        source="gcp", channel="metadata", received_at=first_seen, detail="preempted",
    )


def maintenance_notice(node: str, instance_id: str, event: str, first_seen: float) -> Notice:
    # Maintenance recurs: the first sighting tells one event from the next.
    return Notice(
        id=derived_id("gcp", instance_id, "maintenance", f"{event}@{first_seen:.3f}"), kind=MAINTENANCE_KINDS[event],
        node=node, instance_id=instance_id, issued_at=first_seen,
        deadline=first_seen + MAINTENANCE_LEAD_S, source="gcp", channel="metadata",
        received_at=first_seen, detail=event,
    )


class LongPoll:
    """One key's ``wait_for_change`` loop in a daemon thread, with its own connection.

    Supervised (common.supervise): an exception the loop does not expect restarts it after a
    pause, counted in ``errors`` and ``worker.restarts``, its value forgotten meanwhile (the plain
    poll, which reads the server itself, still runs) -- never a thread gone with a stale value."""

    def __init__(self, http: HttpClient, key: str, wake: Wake, timeout_s: float) -> None:
        self.http = http
        self.key = key
        self.wake = wake
        self.timeout_s = timeout_s
        self.value: str | None = None   # last value the server gave; None while broken
        self.errors = 0
        self.worker = Supervised(f"gcp-longpoll-{key}", self._run, on_crash=self._crashed)
        self._stop = self.worker.stopping

    def start(self) -> LongPoll:
        self.worker.start()
        return self

    def stop(self) -> None:
        self.worker.stop()

    def _crashed(self, crash: Crash) -> None:
        self.value = None
        self.errors += 1

    def _run(self, stopping: threading.Event) -> None:
        etag, delay = "", 0.5
        try:
            while not self._stop.is_set():
                path = PREFIX + self.key
                if etag:
                    path += f"?wait_for_change=true&timeout_sec={LONG_POLL_S}&last_etag={quote(etag)}"
                try:
                    resp = self.http.request("GET", path, headers=FLAVOR, timeout_s=LONG_POLL_S + self.timeout_s)
                    if resp.status != 200:
                        raise MetadataError(http_reason(resp.status), path)
                except (HttpError, MetadataError):
                    self.value, etag = None, ""
                    self.errors += 1
                    self._stop.wait(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                    continue
                delay = 0.5
                value = resp.body.decode("ascii", "replace").strip()
                new_etag = resp.headers.get("etag", "")
                etag = new_etag if _ETAG.match(new_etag) else ""
                changed = value != self.value
                self.value = value
                if changed and not self._stop.is_set():
                    self.wake()
                if not etag:
                    # No usable ETag: long-polling is impossible; the plain poll still runs.
                    self._stop.wait(RETRY_MAX_S)
        finally:
            self.http.close()   # a restart connects afresh


class Source(BaseSource):
    name = "gcp"

    def __init__(self, config: Config, http: HttpClient | None = None, wake: Wake | None = None) -> None:
        super().__init__(config, http, wake)
        self.config = config
        self.preempted_at: float | None = None
        self.maintenance: dict[str, Notice] = {}     # event value -> its notice
        self.long_polls: dict[str, LongPoll] = {}

    def resume(self, active: Iterable[Notice]) -> None:
        for n in self.own(active):
            if n.kind == "reclaim" and n.detail == "preempted":
                self.preempted_at = n.issued_at
            elif n.detail in MAINTENANCE_EVENTS and n.kind == MAINTENANCE_KINDS[n.detail]:
                self.maintenance[n.detail] = n

    def poll(self, now: float) -> PollResult:
        if self.wake is not None and not self.long_polls:
            self._start_long_polls()
        if not self.instance_id:
            self.instance_id = self._read(INSTANCE_ID)[:64]
        return run_checks((
            lambda r: self._check_preempted(r, now),
            lambda r: self._check_maintenance(r, now),
        ))

    def _check_preempted(self, result: PollResult, now: float) -> None:
        if parse_preempted(self._read(PREEMPTED)):
            if self.preempted_at is None:
                self.preempted_at = now
            result.notices.append(preemption_notice(self.node, self.instance_id, self.preempted_at))

    def _check_maintenance(self, result: PollResult, now: float) -> None:
        event = parse_maintenance_event(self._read(MAINTENANCE))
        if event == "NONE":
            result.withdrawn += [n.id for n in self.maintenance.values()]
            self.maintenance.clear()
            return
        if event not in self.maintenance:
            self.maintenance[event] = maintenance_notice(self.node, self.instance_id, event, now)
        result.notices += list(self.maintenance.values())

    def _read(self, key: str) -> str:
        try:
            body = self.fetch("GET", PREFIX + key, headers=FLAVOR)
        except MetadataError:
            parked = self.long_polls.get(key)
            if parked is None or parked.value is None:
                raise
            return parked.value
        if body is None:   # fetch returns None only with missing_ok
            raise MetadataError("no_body", key)
        return body.decode("ascii", "replace")

    def _start_long_polls(self) -> None:
        if self.wake is None:
            raise RuntimeError("long polls started before the wake-up callback was set")
        m = self.config.metadata
        for key in (PREEMPTED, MAINTENANCE):
            http = HttpClient(m.url, timeout_s=m.timeout_s, max_body=m.max_body)
            self.long_polls[key] = LongPoll(http, key, self.wake, m.timeout_s).start()

    def close(self) -> None:
        for lp in self.long_polls.values():
            lp.stop()
        super().close()
