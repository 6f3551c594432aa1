"""Which pod an agent-socket client lives in: its peer pid -> /proc/PID/cgroup -> the pod UID.

The kubelet puts every container of a pod under a cgroup named after the pod's
UID, whatever the driver:

- cgroupfs: ``/kubepods/burstable/pod8dbc5577-d0e2-4706-8787-57d52c03ddf2/<container>``
- systemd:  ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/...``

The agent runs on the host (in the host's cgroup namespace), so it sees these
full paths; the pid is the kernel's SO_PEERCRED, so a client cannot speak for
another pod. A client is then one of three things:

- in a pod: the pod is held back from eviction until the client acks (or the
  checkpoint window ends);
- not in a pod (a host process, a Slurm job): it holds nothing;
- unknown (pid 0 -- a peer in another pid namespace the kernel cannot map --
  or an unreadable /proc entry): it might be any pod, so until it acks every
  pod waits for the checkpoint window. That is the fallback: at the end of the
  window everything is evicted anyway, acked or not.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

UNKNOWN = "?"   # a client whose pod cannot be told
_POD_UID = re.compile(
    r"kubepods[^\n]*?[/-]pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in a /proc/PID/cgroup text (v1 or v2), or None if the process is in no pod."""
    for line in text.splitlines():
        m = _POD_UID.search(line)
        if m:
            return m.group(1).replace("_", "-").lower()
    return None


def pod_uid_of_pid(pid: int, proc_root: str = "/proc") -> str | None:
    """The pod UID of a process, None if it is in no pod, UNKNOWN if that cannot be told."""
    if pid <= 0:
        return UNKNOWN
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return pod_uid_from_cgroup(f.read(65536))
    except OSError:
        return UNKNOWN


def holds(clients: Iterable[tuple[str | None, bool]]) -> tuple[frozenset[str], bool]:
    """From (pod uid or None or UNKNOWN, acked) per client: the pod UIDs still checkpointing, and
    whether an unplaceable client holds every pod."""
    held: set[str] = set()
    hold_all = False
    for uid, acked in clients:
        if acked or uid is None:
            continue
        if uid == UNKNOWN:
            hold_all = True
        else:
            held.add(uid)
    return frozenset(held), hold_all
