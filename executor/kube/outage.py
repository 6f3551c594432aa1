"""What a Kubernetes drain does around an API server that stopped answering (part of ``DrainRunner``).

When the server counts as down (``drain_plan.ApiHealth``), the drain waits for it,
probing every ``PROBE_INTERVAL_S``; it goes around it only as ``drain_plan.fallback_due``
allows (the contract's kinds, as late as leaves the kubelet its lead time, never in a
dry run, once per notice) with the fallback command (``last_resort``), and only once
the marker saying it starts is durably on disk and the drain was not stopped
meanwhile (a withdrawal, a takeover): ``drain.fallback_started``, ``drain.fallback``.
Back, it makes the node what the drain says (``drain.reconciled``).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from common.clock import mono
from common.events import EventType
from common.timefmt import format_rfc3339
from common.wire import DrainState, Phase, Step
from executor.kube import last_resort, node_steps
from executor.kube.api import KubeApi, KubeError, NotOwnNode, Unreachable
from executor.kube.drain_plan import ApiHealth, fallback_due
from executor.kube.drain_spec import DrainSpec
from executor.kube.memo import KubeMemo
from executor.scheduler import Announce, NewState, Remaining, Remember, Report, Saved

PROBE_INTERVAL_S = 1.0
LINGER_S = 30.0            # past the deadline the machine is gone: stop trying
FALLBACK_SAVE_WAIT_S = 5.0   # for the record saying the fallback starts to be on disk
NOT_RUN = "fallback:not-run-unsaved"   # in what is left (so the verdict's): the fallback was refused


class Stopped(Exception):
    """The drain was asked to stop (notice withdrawn, taken over, executor exiting)."""


class AroundTheServer:
    """The outage half of ``DrainRunner``: the attributes below are the runner's."""

    spec: DrainSpec
    _clock: Callable[[], float]
    _health: ApiHealth
    _stop: threading.Event
    _steps: set[str]
    _memo: KubeMemo
    _fallback_refused: bool

    def _report(self, r: Report) -> None:
        raise NotImplementedError

    def _set_phase(self, phase: str) -> None:
        raise NotImplementedError

    def _step(self, step: str, event: EventType | None = None, **data: Any) -> None:
        raise NotImplementedError

    def _wait(self, seconds: float) -> None:
        raise NotImplementedError

    def _unanswered(self, api: KubeApi, error: str) -> None:
        """One unanswered call. Once the server counts as down: wait for it, probing, and go
        around it if (and only when) ``fallback_due`` says so; then reconcile."""
        since = mono()   # "down for" is an interval: monotonic
        self._health.failed(since)
        if not self._health.down(since, self.spec.down_after_s):
            return
        down_since = self._health.since or since
        # What keeps the node from empty now, for the record (and the verdict, should it stay so).
        self._report(Remaining(self.spec.notice_id, ("api-server:unreachable",)
                               + ((NOT_RUN,) if self._fallback_refused else ())))
        while True:
            now = self._clock()
            if now > self.spec.deadline + LINGER_S:   # the machine is gone, or should be: stop trying
                self._report(NewState(self.spec.notice_id, DrainState.ENDED))
                raise Stopped()
            # A withdrawn (cancelled) notice's drain is being stopped: never go around for it.
            if not self._stop.is_set() and fallback_due(
                    down=True, allowed=self.spec.fallback_allowed, dry_run=self.spec.dry_run,
                    done=Step.FALLBACK in self._steps or self._memo.fallback_started is not None
                    or self._fallback_refused,
                    now=now, at=self.spec.fallback_at):
                self._fallback(error, mono() - down_since)
            try:
                api.get_node()
                break
            except Unreachable as e:
                error = str(e)
                self._wait(PROBE_INTERVAL_S)
            except KubeError:
                break   # an answer, even a refusal: the server is back
        self._health.ok()
        self._reconcile(api, down_since)

    def _fallback(self, error: str, down_for_s: float) -> None:
        """Written down (and durably on disk) before it runs: an executor killed meanwhile never runs it
        twice. It runs only for a notice still active -- a withdrawal (or a takeover) stops this drain,
        and is looked for again once the save is answered -- and never on a marker the disk refused."""
        s, saved = self.spec, Saved()
        self._memo.fallback_started = self._clock()
        self._report(Remember(s.notice_id, self._memo.to_dict(), saved))
        answered = saved.wait(FALLBACK_SAVE_WAIT_S)
        if self._stop.is_set():
            raise Stopped()   # withdrawn (or taken over) while it was being written down
        if not (answered and saved.ok):
            self._memo.fallback_started = None
            self._fallback_refused = True
            why = "the record saying it starts could not be saved" if answered else "the save was not answered"
            self._report(Remaining(s.notice_id, ("api-server:unreachable", NOT_RUN)))
            self._report(Announce(s.notice_id, "drain.fallback", {
                "ran": False, "reason": why, "command": list(s.fallback_command), "error": error[:300],
                "down_for_ms": round(down_for_s * 1000)}))
            return
        self._set_phase(Phase.FALLBACK)
        self._report(Announce(s.notice_id, "drain.fallback_started", {
            "command": list(s.fallback_command), "error": error[:300], "down_for_ms": round(down_for_s * 1000),
            "at": format_rfc3339(s.fallback_at), "deadline": s.deadline_text}))
        self._step(Step.FALLBACK, "drain.fallback", error=error[:300], **last_resort.run_command(s.fallback_command),
                   down_for_ms=round(down_for_s * 1000))

    def _reconcile(self, api: KubeApi, down_since: float) -> None:
        """The server is back: make the node's state what the drain says, and say what happened."""
        s = self.spec
        detail: dict[str, Any] = {"down_for_ms": round((mono() - down_since) * 1000)}
        try:
            detail.update(node_steps.cordon_and_taint(api, s.taint_key, s.kind, s.notice_id, s.deadline_text,
                                                      s.source))
            detail["remaining"] = node_steps.remaining_pods(api)
            self._report(Remaining(s.notice_id, tuple(detail["remaining"])))
        except (Unreachable, KubeError, NotOwnNode) as e:
            detail["error"] = str(e)[:300]   # the loop that called us retries its own step
        self._step(Step.RECONCILED, "drain.reconciled", **detail)
