"""Which Eviction version the agent sends, from discovery documents shaped as the server's (pure).

/api/v1's entry is the one kube-apiserver lists (``EvictionREST.GroupVersionKind``: 1.20.2 lists
policy/v1beta1, 1.22+ policy/v1), the one kubectl's ``CheckEvictionSupport`` reads.
"""
from __future__ import annotations

import pytest

from executor.kube.discovery import choose, listed_eviction, needs_group


def api_v1(version: str | None, group: str | None = "policy") -> dict:
    resources = [{"name": "pods", "namespaced": True, "kind": "Pod", "verbs": ["get"]}]
    if version is not None:
        entry = {"name": "pods/eviction", "singularName": "", "namespaced": True, "kind": "Eviction",
                 "verbs": ["create"], "version": version}
        if group is not None:
            entry["group"] = group
        resources.append(entry)
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}


def policy_group(*versions: str) -> dict:
    listed = [{"groupVersion": f"policy/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "name": "policy", "versions": listed, "preferredVersion": listed[0]}


@pytest.mark.parametrize(("version", "expected"), [("v1", "v1"), ("v1beta1", "v1beta1"), ("", "v1beta1")])
def test_a_listed_version_the_agent_knows_is_used_as_is(version, expected):
    listed = listed_eviction(api_v1(version))
    assert not needs_group(listed)
    support = choose(listed)
    assert support.version == expected and not support.refused


def test_an_unknown_listed_version_falls_back_to_the_newest_known_one_the_group_serves():
    listed = listed_eviction(api_v1("v2"))
    assert listed == "policy/v2" and needs_group(listed)
    assert choose(listed, policy_group("v2", "v1", "v1beta1")).version == "v1"
    assert choose(listed, policy_group("v2", "v1beta1")).version == "v1beta1"


@pytest.mark.parametrize("group", [policy_group("v2"), None, {"versions": "garbage"}])
def test_an_unknown_version_and_nothing_known_served_is_a_refusal_naming_what_was_listed(group):
    support = choose(listed_eviction(api_v1("v2")), group)
    assert support.refused and support.version == ""
    assert "policy/v2" in support.why and "DELETE" in support.why


def test_no_eviction_entry_at_all_is_a_refusal_not_a_delete():
    """kubectl deletes when /api/v1 lists no pods/eviction; the agent refuses instead."""
    listed = listed_eviction(api_v1(None))
    assert listed is None and not needs_group(listed)
    support = choose(listed)
    assert support.refused and "no pods/eviction" in support.why


def test_an_eviction_in_another_group_is_not_taken_for_policy():
    support = choose(listed_eviction(api_v1("v1", group="example.com")), None)
    assert support.refused
