"""deploy/kubernetes/rbac.yaml and admission-policy.yaml grant the agent only what its calls need.

Parsed with PyYAML (the test extra). The node's conditions (issue 28: ``NoticeScheduled`` on
``nodes/status``, ``DisruptionTarget`` on ``pods/status``) go as the node identity, which the Node
authorizer already grants those verbs and NodeRestriction confines to its own Node and pods
(verified on 1.20.2: tests/executor/kube/test_conditions_real.py). So RBAC gains nothing for them,
and the sco-agent service account -- the taint credential -- must never be granted a status
subresource: its admission policy matches ``nodes`` only, and would not see a status write.
"""
from __future__ import annotations

import os

import yaml

from tests.support.agent_rig import REPO

RBAC = os.path.join(REPO, "deploy", "kubernetes", "rbac.yaml")
POLICY = os.path.join(REPO, "deploy", "kubernetes", "admission-policy.yaml")


def docs(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def rules_of(kind_name: str) -> list[dict]:
    (role,) = [d for d in docs(RBAC) if d["kind"] == "ClusterRole" and d["metadata"]["name"] == kind_name]
    return role["rules"]


def test_the_roles_are_exactly_the_two_the_agent_needs():
    roles = {d["metadata"]["name"]: d["rules"] for d in docs(RBAC) if d["kind"] in ("ClusterRole", "Role")}
    assert roles == {
        "sco-agent:node-taint": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        "sco-agent:read-pdbs": [{"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
                                 "verbs": ["get", "list", "watch"]}],
    }


def test_no_status_subresource_is_granted_by_rbac():
    """The conditions ride on the node identity's own authority (the Node authorizer), not on RBAC."""
    granted = [r for d in docs(RBAC) if d["kind"] in ("ClusterRole", "Role") for rule in d["rules"]
               for r in rule["resources"]]
    assert not [r for r in granted if "/" in r or r == "*"], granted


def test_the_policy_still_confines_the_service_account_to_its_own_node():
    (policy,) = [d for d in docs(POLICY) if d["kind"] == "ValidatingAdmissionPolicy"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    exprs = [v["expression"] for v in policy["spec"]["validations"]]
    assert any("object.metadata.name == request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"
               in e for e in exprs)
    (match,) = policy["spec"]["matchConditions"]
    assert match["expression"] == 'request.userInfo.username == "system:serviceaccount:sco-system:sco-agent"'
