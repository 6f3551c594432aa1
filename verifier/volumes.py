"""Which of the node's attached volumes a drain must still see go (pure: plain data, no I/O).

How the peers behave (DESIGN section 9, issue 28 point 6): the kubelet lists the volumes mounted
on its node in ``node.status.volumesInUse`` and does not let a pod object go until its volumes
are unmounted; the attach/detach controller in kube-controller-manager detaches a volume once no
pod on the node needs it and the kubelet no longer lists it in use, and removes it from
``node.status.volumesAttached`` when the detach is done. A volume left "in use" (the CSI node
pod gone before it unmounted, a kubelet stopped) is force-detached only after
``ReconcilerMaxWaitForUnmountDuration``, 6 minutes (kubernetes attach_detach_controller.go; the
EBS CSI driver's FAQ "6-Minute Delays in Attaching Volumes", PR #1927; kubernetes #105341: not
configurable). Until then a StatefulSet's replacement elsewhere cannot attach it
(aws-ebs-csi-driver #1955). Karpenter's answer is the same wait: confirm the volumes are detached
before the node goes (karpenter-provider-aws PR #6336, "B1").

What the agent waits for: every volume still in ``volumesAttached`` once the node is empty,
except those that pods staying on the node (DaemonSets, static pods, pods skipped by their own
policy) may be holding: when any staying pod mounts an attachable volume (a claim, an ephemeral
or an inline CSI volume), the volumes the kubelet still lists in use are taken as theirs. The
agent reads no PersistentVolume (its node identity may not, and it needs none): a gone pod's
volume that the kubelet still lists in use beside such a pod is then not waited for -- the limit,
said in docs/kubernetes.md.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class BadShape(ValueError):
    """The node's volume lists are not what the API documents."""


# Pod volume sources the attach/detach controller attaches to a node.
ATTACHABLE = ("persistentVolumeClaim", "ephemeral", "csi")


def names(node: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``status.volumesAttached`` names, ``status.volumesInUse``), each sorted; BadShape if the
    node's status holds them in another shape (the read is refused whole, never guessed at)."""
    status = node.get("status") or {}
    if not isinstance(status, dict):
        raise BadShape("the node: status is not an object")
    attached = status.get("volumesAttached") or []
    in_use = status.get("volumesInUse") or []
    if not isinstance(attached, list) or not all(isinstance(v, dict) and isinstance(v.get("name"), str)
                                                 for v in attached):
        raise BadShape("the node: status.volumesAttached is not a list of {name, devicePath}")
    if not isinstance(in_use, list) or not all(isinstance(v, str) for v in in_use):
        raise BadShape("the node: status.volumesInUse is not a list of names")
    return tuple(sorted({v["name"] for v in attached})), tuple(sorted(set(in_use)))


def mounts_attachable(pod: dict[str, Any]) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(isinstance(v, dict) and any(k in v for k in ATTACHABLE) for v in volumes)


def to_wait_for(attached: Iterable[str], in_use: Iterable[str], staying: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The attached volumes no staying pod accounts for (sorted)."""
    theirs = set(in_use) if any(mounts_attachable(p) for p in staying) else set()
    return tuple(sorted(set(attached) - theirs))
