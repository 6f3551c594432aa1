"""The contract's ``local_pods`` (issue 28, point 7): kubectl's two drain flags for the kinds where
the machine stays; both off by default, validated, round-tripped."""
from __future__ import annotations

import pytest

from common.contract import BUILTIN, Contract, LocalPods
from tests.common.test_contract import MINIMAL


def test_default_is_kubectls_both_off() -> None:
    assert Contract.from_payload(MINIMAL).local_pods == LocalPods(False, False) == BUILTIN.local_pods


def test_partial_section_and_round_trip() -> None:
    c = Contract.from_payload(dict(MINIMAL, local_pods={"force": True}))
    assert (c.local_pods.delete_emptydir_data, c.local_pods.force) == (False, True)
    assert Contract.from_payload(c.to_dict()) == c


@pytest.mark.parametrize(("value", "named"), [
    ({"force": "yes"}, "local_pods.force"),
    ({"delete_emptydir_data": 1}, "local_pods.delete_emptydir_data"),
    ({"delete-emptydir-data": True}, "local_pods"),
    (["force"], "local_pods"),
])
def test_bad_values_are_refused_naming_the_field(value, named) -> None:
    with pytest.raises(ValueError, match=named):
        Contract.from_payload(dict(MINIMAL, local_pods=value))
