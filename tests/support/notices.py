"""Notices for tests, in the three forms the agent meets them.

- ``notice(...)``: a ``common.notice.Notice``, as the watcher's core holds it;
- ``notice_dict(...)``: its form on watcher.pub (``Notice.to_dict``: RFC 3339 times, channel, arrival);
- ``relay_payload(...)``: what the hall publishes on NATS (DESIGN section 3: ``v`` 1, no arrival fields).

Every time is ``now`` plus an offset, so a test on a fixed clock passes ``now=T0`` and a test
against a running process leaves it to the wall clock.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from common.notice import Notice


def new_id() -> str:
    """A notice id no other test uses (processes keep state across a test's notices)."""
    return f"n-{uuid.uuid4().hex[:8]}"


def notice(id: str = "n1", kind: str = "reclaim", node: str = "node-a", *, deadline_in: float = 120.0,
           now: float | None = None, received_in: float = 0.05, **fields: Any) -> Notice:
    """Issued at ``now``, deadline ``deadline_in`` later, first heard ``received_in`` after issue.

    ``fields`` sets any other Notice field (instance_id, source, channel, detail, or an absolute time).
    """
    now = time.time() if now is None else now
    base = Notice(id=id, kind=kind, node=node, instance_id="i-1", issued_at=now, deadline=now + deadline_in,
                  source="aws", channel="relay", received_at=now + received_in)
    return replace(base, **fields) if fields else base


def notice_dict(id: str = "n1", kind: str = "reclaim", node: str = "node-a", **kw: Any) -> dict[str, Any]:
    """``notice(...)`` as the watcher publishes it in its notice state."""
    return notice(id, kind, node, **kw).to_dict()


def relay_payload(id: str | None = None, kind: str = "reclaim", node: str = "node-a", *,
                  deadline_in: float = 120.0, now: float | None = None, source: str = "sco",
                  instance_id: str = "i-0123456789abcdef0") -> dict[str, Any]:
    """A valid relay payload (common.notice.parse_relay_payload accepts it); ``id`` None: a fresh one."""
    d = notice_dict(id or new_id(), kind, node, deadline_in=deadline_in, now=now, source=source,
                    instance_id=instance_id)
    return {"v": 1, **{k: d[k] for k in ("id", "kind", "node", "instance_id", "issued_at", "deadline", "source")}}
