"""Which Eviction version to send, from the API server's discovery (pure: documents in, a choice out).

The server names the Eviction version in ``GET /api/v1``: the ``pods/eviction`` entry's
``group``/``version`` (``policy/v1beta1`` on 1.20, ``policy/v1`` from 1.22; kubectl's
``pkg/drain/drain.go`` ``CheckEvictionSupport`` reads the same entry). The eviction handler takes
more than the version it lists: ``pkg/registry/core/pod/storage/eviction.go``
(``EvictionREST.AcceptsGroupVersion``) accepts policy/v1 and policy/v1beta1 bodies while discovery
lists policy/v1. So when the listed version is one this agent does not know (a future
``policy/v2``), the agent sends the newest version it knows that the server still serves in the
policy group (``GET /apis/policy``).

When there is none -- no ``pods/eviction`` entry at all, or only policy versions the agent does
not know -- the answer is a refusal, never a plain DELETE: a DELETE bypasses every
PodDisruptionBudget, and kubectl's fallback to it (when discovery lists no eviction) is exactly
the accident this agent must not repeat. The refusal names what the server listed, for the event.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KNOWN_VERSIONS = ("v1", "v1beta1")   # the Eviction versions this agent can send, newest first
POLICY_GROUP = "policy"
EVICTION = "pods/eviction"


@dataclass(frozen=True, slots=True)
class EvictionSupport:
    """The policy version to send Evictions (and read PDBs) as, or ``""`` and why not."""

    version: str
    listed: str = ""    # what /api/v1 lists for pods/eviction ("policy/v2"), "" when nothing
    why: str = ""       # the refusal, when ``version`` is ""

    @property
    def refused(self) -> bool:
        return not self.version


def listed_eviction(api_v1: Mapping[str, Any]) -> str | None:
    """The group/version ``GET /api/v1`` lists for ``pods/eviction`` (None: no entry). Servers
    before 1.8 listed the entry without group and version: that is the old policy/v1beta1."""
    for r in api_v1.get("resources") or []:
        if isinstance(r, dict) and r.get("name") == EVICTION:
            return f"{r.get('group') or POLICY_GROUP}/{r.get('version') or 'v1beta1'}"[:100]
    return None


def needs_group(listed: str | None) -> bool:
    """Whether the choice needs ``GET /apis/policy`` (an entry naming a version we do not know)."""
    return listed is not None and _known(listed) is None


def choose(listed: str | None, policy_group: Mapping[str, Any] | None = None) -> EvictionSupport:
    """The version to send, from the pods/eviction entry (``listed_eviction``) and, when that names
    a version this agent does not know, the policy group's ``APIGroup`` document (None: unread or
    404)."""
    if listed is None:
        return EvictionSupport("", "", "the server lists no pods/eviction subresource in /api/v1; "
                                       "a plain DELETE would bypass PodDisruptionBudgets")
    known = _known(listed)
    if known is not None:
        return EvictionSupport(known, listed)
    served = _served(policy_group)
    for version in KNOWN_VERSIONS:
        if version in served:
            return EvictionSupport(version, listed)
    return EvictionSupport("", listed, (
        f"the server lists Eviction as {listed}, which this agent does not know, and serves none of "
        f"policy/{', policy/'.join(KNOWN_VERSIONS)} (it serves: {', '.join(sorted(served)) or 'none'}); "
        "a plain DELETE would bypass PodDisruptionBudgets")[:500])


def _known(listed: str) -> str | None:
    group, _, version = listed.partition("/")
    return version if group == POLICY_GROUP and version in KNOWN_VERSIONS else None


def _served(policy_group: Mapping[str, Any] | None) -> set[str]:
    if not policy_group:
        return set()
    versions = policy_group.get("versions")
    if not isinstance(versions, list):
        return set()
    return {str(v.get("version"))[:32] for v in versions if isinstance(v, dict) and v.get("version")}
