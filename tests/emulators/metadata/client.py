"""Control helpers for the metadata emulator, the same in-process and as a subprocess.

Times are given as ``in_s`` (seconds from the emulator clock's now) or ``at``
(RFC 3339 or epoch). Every method is one ``/_emu/`` command; the generic ones
(faults, request log, listening) come from ``ControlClient``.
"""
from __future__ import annotations

from typing import Any

from tests.emulators._control import ControlClient


class MetadataControl(ControlClient):
    """Scenario changes for a running metadata emulator."""

    # -- whole emulator -----------------------------------------------------------

    def reset(self) -> None:
        """Back to the start scenario: no notices, clock offset 0, faults and log cleared."""
        self.call("reset")

    def now(self) -> float:
        return self.call("clock")["now"]

    def advance_clock(self, seconds: float) -> float:
        """Fast-forward the emulator clock (token expiry, relative times); the new now."""
        return self.call("clock", {"advance": seconds})["now"]

    def state(self) -> dict[str, Any]:
        return self.call("state")

    def gcp_waiters(self) -> int:
        """How many GCP ``wait_for_change`` requests are parked right now."""
        return self.call("state")["gcp_waiters"]

    # -- AWS ----------------------------------------------------------------------

    def aws_spot(self, action: str = "terminate", in_s: float | None = None,
                 at: str | float | None = None, drift: bool = False) -> dict[str, Any]:
        """Post an interruption notice (default: terminate in 120 s); the served JSON."""
        return self.call("aws/spot", {"action": action, "in_s": in_s, "at": at, "drift": drift})

    def aws_clear_spot(self) -> None:
        self.call("aws/spot", {"clear": True})

    def aws_rebalance(self, in_s: float | None = None, at: str | float | None = None) -> dict:
        return self.call("aws/rebalance", {"in_s": in_s, "at": at})

    def aws_clear_rebalance(self) -> None:
        self.call("aws/rebalance", {"clear": True})

    def aws_maintenance_add(self, code: str = "system-reboot", in_s: float | None = None,
                            **fields: Any) -> str:
        """Schedule an active event (fields: at, duration_s, deadline_s, description, event_id)."""
        return self.call("aws/maintenance",
                         {"op": "add", "code": code, "in_s": in_s, **fields})["event_id"]

    def aws_maintenance_state(self, event_id: str, state: str) -> None:
        """Move an event to active, canceled or completed."""
        self.call("aws/maintenance", {"op": "state", "event_id": event_id, "state": state})

    def aws_maintenance_remove(self, event_id: str) -> None:
        self.call("aws/maintenance", {"op": "remove", "event_id": event_id})

    def aws_invalidate_tokens(self) -> None:
        """Forget every issued token: the agent's next GET gets 401."""
        self.call("aws/tokens", {"invalidate": True})

    def aws_max_ttl(self, seconds: int | None) -> None:
        """Grant at most ``seconds`` of TTL to new tokens (``None``: as asked)."""
        self.call("aws/tokens", {"max_ttl": seconds or 0})

    def aws_imdsv1(self, enabled: bool) -> None:
        self.call("aws/imdsv1", {"enabled": enabled})

    # -- GCP ----------------------------------------------------------------------

    def gcp_set(self, preempted: bool | None = None,
                maintenance_event: str | None = None) -> dict[str, Any]:
        return self.call("gcp", {"preempted": preempted, "maintenance_event": maintenance_event})

    # -- Azure --------------------------------------------------------------------

    def azure_add(self, event_type: str = "Preempt", in_s: float | None = None,
                  **fields: Any) -> str:
        """Add a Scheduled event (fields: at, resources, description, source, duration_s,
        event_id, status); the default NotBefore is the type's documented minimum notice."""
        return self.call("azure/event",
                         {"op": "add", "event_type": event_type, "in_s": in_s, **fields})["event_id"]

    def azure_status(self, event_id: str, status: str) -> None:
        self.call("azure/event", {"op": "status", "event_id": event_id, "status": status})

    def azure_remove(self, event_id: str) -> None:
        """The event finished or was cancelled: it disappears from the document."""
        self.call("azure/event", {"op": "remove", "event_id": event_id})

    def azure_acks(self) -> dict[str, Any]:
        """``{"acks": [{"t", "event_ids", "started", "released", "unknown"}...], "rejected": n}``."""
        return self.call("azure/acks")

    def azure_released(self) -> dict[str, list[str]]:
        """VM name -> the event ids an acknowledgement (anyone's) let proceed for it."""
        return dict(self.call("azure/released")["released"])

    # -- SCO ----------------------------------------------------------------------

    def sco_notice(self, **fields: Any) -> dict[str, Any]:
        """Serve a valid relay payload (fields: id, kind, node, instance_id, issued_at,
        in_s/at for the deadline, source); returns it."""
        return self.call("sco/notice", fields)

    def sco_raw(self, payload: Any) -> None:
        """Serve any JSON value verbatim (bad-input tests)."""
        self.call("sco/notice", {"raw": payload})

    def sco_clear(self) -> None:
        self.call("sco/notice", {"clear": True})
