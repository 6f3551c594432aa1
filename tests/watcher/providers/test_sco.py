"""The on-premises hall's endpoint: the relay payload, validated by the relay's own validator."""
from __future__ import annotations

import pytest

from tests.watcher.conftest import make_config
from watcher.providers import MetadataError
from watcher.providers.sco import Source


def source(emu) -> Source:
    return Source(make_config("sco", emu.url, node="node-emu-0"))


def test_no_notice_is_404_and_nothing(emu):
    assert source(emu).poll(1.0).notices == []


def test_notice_is_parsed_like_the_relay(emu):
    served = emu.sco_notice(id="hall-7", kind="maintenance", in_s=300)
    (n,) = source(emu).poll(1.0).notices
    assert (n.id, n.kind, n.node, n.channel, n.source) == ("hall-7", "maintenance", "node-emu-0", "metadata", "sco")
    assert n.instance_id == served["instance_id"]


def test_cancel_comes_through_as_a_cancel(emu):
    emu.sco_notice(id="hall-7", kind="cancel")
    assert source(emu).poll(1.0).notices[0].kind == "cancel"


@pytest.mark.parametrize("raw,reason", [([1, 2], "rejected_bad_shape"), ({"v": 2}, "rejected_bad_version"),
                                        ({"v": 1, "id": "x"}, "rejected_bad_field"), ("x" * 9000, "rejected_too_large")])
def test_bad_payloads_are_rejections(emu, raw, reason):
    emu.sco_raw(raw)
    with pytest.raises(MetadataError) as e:
        source(emu).poll(1.0)
    assert e.value.reason == reason


def test_garbage_body_is_a_rejection(emu):
    emu.fault("garbage", path="/sco/")
    with pytest.raises(MetadataError) as e:
        source(emu).poll(1.0)
    assert e.value.reason == "rejected_bad_json"
