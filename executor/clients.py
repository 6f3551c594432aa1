"""The agent socket as the drain core sees it: tell workloads, learn who still checkpoints, collect acks.

Wraps ``AgentSocketServer`` (the non-blocking shell of the socket protocol) with
what the executor adds: which pod each client lives in (``workload_map``: its
peer pid's cgroup, read once per client), which pods an ``extend`` grant holds
(``extended``), every grant and refusal as an event, and turning the server's
refusal counters into ``socket.rejected`` log lines and events. Runs on the loop's thread.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from common.config import Config
from common.events import EventType, NoticeEventSink
from common.log import Logger
from common.recorder import Recorder
from common.runtime import Rejections
from executor import workload_map
from executor.agent_socket import AgentSocketError, AgentSocketServer, ServerLimits
from executor.socket_wire import Extension

REFUSAL_REPORT_S = 10.0   # extend refusals: the first of each reason at once, then counted this often


@dataclass(frozen=True, slots=True)
class AckSeen:
    """A client's checkpoint ack, with the pod it came from."""

    notice_id: str
    key: str               # "name:pid", the drain record's key for it
    status: str
    data: dict[str, Any]   # the drain.checkpoint_acked event's data


class Clients:
    def __init__(self, server: AgentSocketServer, path: str, log: Logger, emit: NoticeEventSink) -> None:
        self.server = server
        self.path = path
        self.pods: dict[int, str | None] = {}   # client -> its pod UID (None: in no pod)
        # The server counts what it refuses (executor.socket_protocol.ERROR_CODES); these
        # turn its counters into socket.rejected log lines and events.
        self.rejections = Rejections(log, what="socket", emit=emit)
        self._errors_seen: dict[str, int] = {}
        self._turn: list[dict[str, Any]] = []   # the notices announced since the last tell()
        self.log, self.emit = log, emit
        # A client may send extend after extend (each refusal is also an error reply, so the
        # connection is closed after MAX_ERRORS); the events are bounded as every flood guard is.
        self.refusals: Recorder[EventType] = Recorder(self._say_refused, REFUSAL_REPORT_S)

    @classmethod
    def open(cls, config: Config, log: Logger, emit: NoticeEventSink) -> Clients | None:
        """Listen on the configured socket; None if it cannot be used (logged): the drain still runs,
        workloads just are not told."""
        s = config.agent_socket
        try:
            server = AgentSocketServer(s.path, mode=int(s.mode, 8), group=s.group or None,
                                       limits=ServerLimits(max_clients=s.max_clients), holdable=in_a_pod)
            server.listen()
        except (AgentSocketError, OSError, KeyError, ValueError) as e:
            log.error("agent_socket.unavailable", path=s.path, error=str(e)[:300])
            return None
        blocked = blocking_dir(s.path)
        if blocked is not None:
            # The agent still runs and root clients still connect; workloads as other users cannot.
            log.warning("agent_socket.unreachable", path=s.path, dir=blocked,
                        detail="a directory above the socket is not searchable by the users its mode admits")
        return cls(server, s.path, log, emit)

    # -- what the drain core uses ------------------------------------------------------
    def announce(self, message: dict[str, Any]) -> None:
        """One notice that drains this turn; ``tell`` hands the turn's notices to the socket."""
        self._turn.append(message)

    def tell(self) -> None:
        """The turn's notices, all at once: each client hears only the one that governs it
        (the earliest deadline), and again only when that changes."""
        notices, self._turn = self._turn, []
        self.server.set_notices(notices)

    def count(self) -> int:
        return len(self.server.clients())

    def withdraw(self, notice_id: str) -> None:
        self.server.withdraw(notice_id)

    def holds(self, notice_id: str) -> tuple[frozenset[str], bool]:
        """The pods whose clients have not acked ``notice_id`` yet, and whether a client no pod can
        be told for holds every pod. A client answers every later notice by acking the one that
        governs it: it was told only that one, and checkpointed for the earliest deadline."""
        infos = self.server.clients()
        live = {c.client for c in infos}
        self.pods = {k: v for k, v in self.pods.items() if k in live}
        return workload_map.holds([(self._pod_of(c.client, c.pid), notice_id in c.answered or c.acked is not None)
                                   for c in infos])

    def extended(self) -> dict[str, float]:
        """Pod UID -> until when (epoch) an ``extend`` grant holds it: the live grant of each client
        that has not answered the notice governing it. A grant is only ever given to a client in a
        pod the agent can tell (``in_a_pod``), so it holds that pod and no other."""
        out: dict[str, float] = {}
        for c in self.server.clients():
            if c.extended_until is None:
                continue
            pod = self._pod_of(c.client, c.pid)
            if pod is not None and pod != workload_map.UNKNOWN:
                out[pod] = max(out.get(pod, 0.0), c.extended_until)
        return out

    def acks(self) -> list[AckSeen]:
        out = []
        for ack in self.server.drain_acks():
            data = {"client": ack.name, "pid": ack.pid, "uid": ack.uid, "status": ack.status,
                    "latency_ms": round(ack.latency_s * 1000), "replay": ack.replay,
                    "pod_uid": self._pod_of(ack.client, ack.pid)}
            out.append(AckSeen(ack.notice_id, f"{ack.name}:{ack.pid}", ack.status, data))
        return out

    def _pod_of(self, client: int, pid: int) -> str | None:
        if client not in self.pods:
            self.pods[client] = workload_map.pod_uid_of_pid(pid)
        return self.pods[client]

    # -- what the loop uses ----------------------------------------------------------------
    def fileno(self) -> int:
        return self.server.fileno()

    def serve(self, readable: bool, mono: float) -> None:
        if readable:
            self.server.process(mono)
        self.server.tick(mono)
        for ext in self.server.drain_extensions():
            self._extension(ext)

    def _extension(self, ext: Extension) -> None:
        """Every grant is an event (``drain.checkpoint_extended``); refusals go through the recorder."""
        data: dict[str, Any] = {"client": ext.name, "pid": ext.pid, "uid": ext.uid, "asked_s": ext.asked_s,
                                "pod_uid": self._pod_of(ext.client, ext.pid) if ext.client else None}
        if ext.checkpoint_by:
            data["checkpoint_by"] = ext.checkpoint_by
            self.log.info("drain.checkpoint_extended", notice_id=ext.notice_id, **data)
            self.emit("drain.checkpoint_extended", ext.notice_id, data, time.time())
        else:
            data.update(reason=ext.reason, message=ext.message, notice_id=ext.notice_id)
            self.refusals.record("drain.extend_refused", ext.reason, data)

    def _say_refused(self, type_: EventType, data: dict[str, Any]) -> None:
        data = dict(data)
        nid = str(data.pop("notice_id", ""))
        self.log.warning(type_, notice_id=nid, **data)
        self.emit(type_, nid, data, time.time())

    def report_errors(self, force: bool = False) -> None:
        """New refusals since the last call, counted by their error code."""
        for key, n in self.server.stats().items():
            if key == "error.extend_refused":
                continue   # said by its own event, drain.extend_refused (_extension)
            if key.startswith("error.") or key in ("acks_dropped", "extensions_dropped"):
                delta = n - self._errors_seen.get(key, 0)
                if delta > 0:
                    self._errors_seen[key] = n
                    self.rejections.count(self.path, key.removeprefix("error."), "agent socket client refused", delta)
        self.rejections.tick(force)
        self.refusals.tick(force)

    def close(self) -> None:
        self.server.close()


def in_a_pod(pid: int) -> bool:
    """Can the pod of this peer be told? (Only then may its client be granted an extension.)"""
    pod = workload_map.pod_uid_of_pid(pid)
    return pod is not None and pod != workload_map.UNKNOWN


def blocking_dir(path: str) -> str | None:
    """The first directory above ``path`` that keeps out a user the socket's own mode admits
    (other users for o+w, its group for g+w): connecting needs search permission on every one.
    None when nothing blocks, or the socket admits nobody but its owner."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    others, group = bool(st.st_mode & stat.S_IWOTH), bool(st.st_mode & stat.S_IWGRP)

    def searchable(d: os.stat_result) -> bool:
        if d.st_mode & stat.S_IXOTH:
            return True
        return not others and group and bool(d.st_mode & stat.S_IXGRP) and d.st_gid == st.st_gid

    d = os.path.dirname(os.path.abspath(path))
    while others or group:
        try:
            if not searchable(os.stat(d)):
                return d
        except OSError:
            return d
        if d == os.path.dirname(d):
            return None
        d = os.path.dirname(d)
    return None
