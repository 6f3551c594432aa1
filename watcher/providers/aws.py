"""AWS EC2 instance metadata, IMDSv2 (token first, then every GET carries it).

Three documents, each its own check (one failing does not hide the others):

- ``spot/instance-action``: 404 until AWS decides to take the instance, then
  ``{"action": "terminate|stop|hibernate", "time": RFC 3339}`` -> ``reclaim``.
  The id is derived from the instance and the action time. The first notice
  seen is *latched* while the document stays present: AWS's own mock returns a
  new time on every read, and a naive poller would see a new reclaim every 5 s.
  Only an earlier time (or another action) replaces it -- never drain later
  than AWS says.
- ``events/recommendations/rebalance``: ``{"noticeTime": RFC 3339}`` ->
  ``rebalance`` (the contract maps it to cordon-only). AWS gives no deadline;
  the earliest a reclaim can follow is one interruption notice, two minutes.
- ``events/maintenance/scheduled``: a list of events with times in Go's
  ``2 Jan 2006 15:04:05 GMT`` layout; ``active`` -> a notice with the deadline
  ``NotBefore``; ``canceled``/``completed`` (or gone from the list) -> withdrawn.
  Its kind by ``Code``, as AWS defines them ("Scheduled events for Amazon EC2
  instances", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instances-status-check_sched.html):
  ``instance-stop`` (the instance is stopped; started again, it is on a new host),
  ``instance-retirement`` (stopped, or terminated if instance-store backed),
  ``instance-reboot`` and ``system-reboot`` (the instance, or its host, is rebooted)
  -> ``maintenance``, which the contract drains; ``system-maintenance`` ("might be
  temporarily affected by network maintenance or power maintenance": the instance
  keeps running) -> ``pause``, which the built-in contract ignores. A code AWS adds
  later drains (``maintenance``): the safe side.

The token is requested with the configured TTL; the TTL AWS *granted* (echoed
in the response header) decides when it is renewed, a little before expiry,
and a 401 drops it. IMDSv1 (no token) only when configured: it is an SSRF risk.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import ujson

from common.config import Config
from common.http import HttpClient, HttpError
from common.notice import Notice, derived_id, notice_time
from common.timefmt import parse_gmt, parse_rfc3339
from watcher.providers import BaseSource, MetadataError, PollResult, Wake, http_reason, run_checks

TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
INSTANCE_ID = "/latest/meta-data/instance-id"
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
MAINTENANCE = "/latest/meta-data/events/maintenance/scheduled"
SPOT_ACTIONS = ("terminate", "stop", "hibernate")
# Scheduled-event Code -> notice kind (the module docstring cites what each means).
EVENT_KINDS = {"instance-stop": "maintenance", "instance-retirement": "maintenance",
               "instance-reboot": "maintenance", "system-reboot": "maintenance", "system-maintenance": "pause"}
# A spot interruption notice is issued two minutes before the action.
SPOT_LEAD_S = 120.0
# Renew the token this long before it expires (at most a quarter of its life),
# so no poll ever carries a dead one.
TOKEN_RENEW_MARGIN_S = 60.0
MAX_EVENTS = 100
_MAX_TEXT = 256
_TOKEN = re.compile(r"^[!-~]{1,1024}$")   # visible ASCII: IMDS tokens are base64


def parse_instance_action(body: bytes, node: str, instance_id: str, now: float) -> Notice:
    """``spot/instance-action`` -> a reclaim notice; MetadataError("bad_body") otherwise."""
    doc = _json(body, "spot/instance-action")
    action = doc.get("action")
    if action not in SPOT_ACTIONS:
        raise MetadataError("bad_body", f"spot/instance-action: unknown action {str(action)[:32]!r}")
    when_text, when = _rfc3339(doc, "time", "spot/instance-action time")
    return Notice(
        id=derived_id("aws", instance_id, "reclaim", when_text), kind="reclaim", node=node,
        instance_id=instance_id, issued_at=when - SPOT_LEAD_S, deadline=when, source="aws",
        channel="metadata", received_at=now, detail=action,
    )


def parse_rebalance(body: bytes, node: str, instance_id: str, now: float) -> Notice:
    """``events/recommendations/rebalance`` -> a rebalance notice."""
    when_text, when = _rfc3339(_json(body, "rebalance"), "noticeTime", "rebalance noticeTime")
    return Notice(
        id=derived_id("aws", instance_id, "rebalance", when_text), kind="rebalance", node=node,
        instance_id=instance_id, issued_at=when, deadline=when + SPOT_LEAD_S, source="aws",
        channel="metadata", received_at=now, detail="rebalance-recommendation",
    )


def parse_maintenance(body: bytes, node: str, instance_id: str, now: float) -> tuple[list[Notice], list[str]]:
    """``events/maintenance/scheduled`` -> (active events as notices, ids of canceled/completed)."""
    try:
        events = ujson.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataError("bad_body", f"maintenance: {e}") from None
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise MetadataError("bad_body", "maintenance: not a list of at most 100 events")
    notices, ended = [], []
    for event in events:
        if not isinstance(event, dict):
            raise MetadataError("bad_body", "maintenance: an event is not an object")
        event_id, code, state = (_text(event, k, "maintenance") for k in ("EventId", "Code", "State"))
        nid = derived_id("aws", instance_id, "maintenance", event_id)
        if state in ("canceled", "completed"):
            ended.append(nid)
            continue
        if state != "active":
            raise MetadataError("bad_body", f"maintenance: unknown State {state[:32]!r}")
        try:
            not_before = notice_time(parse_gmt(_text(event, "NotBefore", "maintenance")), "NotBefore")
        except ValueError as e:
            raise MetadataError("bad_body", f"maintenance NotBefore: {e}") from None
        notices.append(Notice(
            id=nid, kind=EVENT_KINDS.get(code, "maintenance"), node=node, instance_id=instance_id,
            # AWS does not say when it scheduled the event; first sight is the best we know.
            issued_at=min(now, not_before), deadline=not_before, source="aws",
            channel="metadata", received_at=now, detail=code,
        ))
    return notices, ended


class Source(BaseSource):
    name = "aws"

    def __init__(self, config: Config, http: HttpClient | None = None, wake: Wake | None = None) -> None:
        super().__init__(config, http, wake)
        self.ttl = config.metadata.imds_token_ttl_s
        self.allow_v1 = config.metadata.allow_imdsv1
        self.token = ""
        # The token's TTL is an interval: timed on the monotonic clock (common.clock), not on the
        # poll's wall-clock ``now``, so a wall clock stepped back never keeps an expired token.
        self.mono: Callable[[], float] = time.monotonic
        self.token_expires = float("-inf")
        self.spot: Notice | None = None                 # the latched interruption notice
        self.maintenance: set[str] = set()              # ids of active maintenance notices

    def resume(self, active: Iterable[Notice]) -> None:
        for n in self.own(active):
            if n.kind == "reclaim":
                self.spot = n
            elif n.kind in ("maintenance", "pause"):
                self.maintenance.add(n.id)

    def poll(self, now: float) -> PollResult:
        if not self.instance_id:
            self.instance_id = self._get(INSTANCE_ID, now).decode("ascii", "replace").strip()[:64]
        return run_checks((
            lambda r: self._check_spot(r, now),
            lambda r: self._check_rebalance(r, now),
            lambda r: self._check_maintenance(r, now),
        ))

    def _check_spot(self, result: PollResult, now: float) -> None:
        body = self._get_if_present(INSTANCE_ACTION, now)
        if body is None:
            self.spot = None
            return
        seen = parse_instance_action(body, self.node, self.instance_id, now)
        held = self.spot
        if held is None or seen.detail != held.detail or seen.deadline < held.deadline:
            held = self.spot = seen
        result.notices.append(held)

    def _check_rebalance(self, result: PollResult, now: float) -> None:
        body = self._get_if_present(REBALANCE, now)
        if body is not None:
            result.notices.append(parse_rebalance(body, self.node, self.instance_id, now))

    def _check_maintenance(self, result: PollResult, now: float) -> None:
        body = self._get_if_present(MAINTENANCE, now)
        notices, ended = parse_maintenance(body or b"[]", self.node, self.instance_id, now)
        current = {n.id for n in notices}
        # An active event that vanished from the list without a final state is over too.
        gone = self.maintenance - current
        result.notices += notices
        result.withdrawn += ended + sorted(gone - set(ended))
        self.maintenance = current

    def _get(self, path: str, now: float) -> bytes:
        """A document that must exist: 404 is an error like any other status."""
        body = self._get_if_present(path, now)
        if body is None:
            raise MetadataError(http_reason(404), f"GET {path}")
        return body

    def _get_if_present(self, path: str, now: float) -> bytes | None:
        """A document that may be absent (404: None), e.g. no interruption scheduled."""
        for attempt in (1, 2):
            headers = {}
            token = self._token(now)
            if token:
                headers[TOKEN_HEADER] = token
            try:
                resp = self.http.request("GET", path, headers=headers)
            except HttpError as e:
                raise MetadataError(e.reason, e.detail) from None
            if resp.status == 401 and attempt == 1:
                # Token expired or the service restarted: drop it and get a new one once.
                self.token, self.token_expires = "", 0.0
                continue
            if resp.status == 200:
                return resp.body
            if resp.status == 404:
                return None
            raise MetadataError(http_reason(resp.status), f"GET {path}")
        raise MetadataError("http_401", f"GET {path}: token refused twice")

    def _token(self, now: float) -> str:   # now: the poll's wall clock, unused for the TTL
        mono = self.mono()
        if self.token and mono < self.token_expires:
            return self.token
        try:
            resp = self.http.request("PUT", TOKEN_PATH, headers={TTL_HEADER: str(self.ttl)}, max_body=4096)
        except HttpError as e:
            if self.allow_v1:
                return ""
            raise MetadataError(e.reason, f"token: {e.detail}") from None
        token = resp.body.decode("ascii", "replace").strip()
        # It goes back in a header of every GET: a line break or a non-ASCII character would make
        # each of them fail inside http.client for the token's whole life (up to 6 hours).
        if resp.status != 200 or not _TOKEN.match(token):
            if self.allow_v1:
                return ""
            raise MetadataError(http_reason(resp.status) if resp.status != 200 else "bad_body",
                                "token request refused")
        granted = _granted_ttl(resp.headers.get(TTL_HEADER.lower(), ""), self.ttl)
        self.token = token
        self.token_expires = mono + granted - min(TOKEN_RENEW_MARGIN_S, granted / 4)
        return self.token


def _granted_ttl(header: str, asked: int) -> float:
    """The TTL AWS granted (it may shorten it); what we asked for when the header is absent or odd."""
    header = header.strip()
    if header.isascii() and header.isdigit() and 1 <= int(header) <= asked:
        return float(header)
    return float(asked)


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = ujson.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataError("bad_body", f"{what}: {e}") from None
    if not isinstance(doc, dict):
        raise MetadataError("bad_body", f"{what}: not a JSON object")
    return doc


def _rfc3339(doc: dict[str, Any], key: str, what: str) -> tuple[str, float]:
    """``doc[key]`` as the RFC 3339 text the provider sent (a derived id keys on it) and its epoch seconds."""
    value = doc.get(key)
    if not isinstance(value, str):  # in parse_rfc3339's own words
        raise MetadataError("bad_body", f"{what}: not an RFC 3339 time")
    try:
        return value, notice_time(parse_rfc3339(value), what)
    except ValueError as e:
        raise MetadataError("bad_body", f"{what}: {e}") from None


def _text(doc: dict[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT:
        raise MetadataError("bad_body", f"{what}: {key} must be a non-empty string")
    return value
