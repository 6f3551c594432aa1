"""What a node identity (``system:node:<name>``) may write: the Node authorizer plus NodeRestriction.

Only requests whose (token-mapped) user is ``system:node:<name>`` are judged; any other user, and
an anonymous request, is served as before. The rules are those of kube-apiserver 1.20
(plugin/pkg/admission/noderestriction/admission.go), for the writes a node agent makes, and the
refusal messages are that file's words in ``admission.NewForbidden``'s wrapping
(``<resource> "<name>" is forbidden: <why>``); tests/executor/kube/test_conditions_real.py sends the
same requests to the real 1.20.2 server and to this emulator and compares the answers:

- ``nodes`` (the object and ``nodes/status``): only its own Node (admitNode: "node %q is not
  allowed to modify node %q"), and never a change of its own ``spec.taints`` ("node %q is not
  allowed to modify taints");
- ``pods/status``: only pods bound to it (admitPodStatus: "node %q can only update pod status for
  pods with spec.nodeName set to itself");
- ``pods/eviction``: only pods bound to it (admitPodEviction: "node %s can only evict pods with
  spec.nodeName set to itself" -- the one message whose node name is not quoted);
- ``pods`` DELETE: only pods bound to it (admitPod: "node %q can only delete pods with
  spec.nodeName set to itself");
- reads (GET, LIST, WATCH) are served: the 1.20 Node authorizer's static node rules let a node
  read nodes and pods (the agent's PDB reads come from RBAC, deploy/kubernetes/rbac.yaml).
"""
from __future__ import annotations

from typing import Any

from .errors import forbidden
from .resources import NODES, PODS, ResourceType

NODE_USER_PREFIX = "system:node:"
_READS = ("GET", "HEAD")


def node_of(user: str | None) -> str | None:
    """The node a user is the identity of, or None (not a node identity)."""
    if user and user.startswith(NODE_USER_PREFIX) and len(user) > len(NODE_USER_PREFIX):
        return user[len(NODE_USER_PREFIX):]
    return None


def check_request(node: str, method: str, rt: ResourceType, name: str | None, subresource: str,
                  stored: dict[str, Any] | None) -> None:
    """Refuse (ApiError 403) what this node may not do to ``stored`` (the object as it is now; None
    when absent: the request then fails as it would anyway). Taints are judged by ``check_taints``
    once the change is known."""
    if method in _READS or stored is None or name is None:
        return
    if rt is NODES and name != node:
        raise forbidden("nodes", "", name, f'node "{node}" is not allowed to modify node "{name}"')
    if rt is not PODS:
        return
    bound = str((stored.get("spec") or {}).get("nodeName") or "")
    if bound == node:
        return
    if subresource == "status":
        why = f'node "{node}" can only update pod status for pods with spec.nodeName set to itself'
    elif subresource == "eviction":   # 1.20 formats this one with %s: the node's name unquoted
        why = f"node {node} can only evict pods with spec.nodeName set to itself"
    elif method == "DELETE":
        why = f'node "{node}" can only delete pods with spec.nodeName set to itself'
    else:
        return
    raise forbidden("pods", "", name, why)


def check_taints(node: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """admitNode's update rule: a node may not change its own taints (in any order, any way)."""
    def taints(obj: dict[str, Any]) -> list[Any]:
        return list((obj.get("spec") or {}).get("taints") or [])

    if taints(old) != taints(new):
        raise forbidden("nodes", "", old["metadata"]["name"], f'node "{node}" is not allowed to modify taints')
