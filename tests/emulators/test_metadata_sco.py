"""The SCO hall's notice endpoint as the emulator serves it."""
from __future__ import annotations

import pytest
import requests

from common.timefmt import parse_rfc3339
from tests.emulators.metadata import MetadataEmulator


def test_sco_notice_is_404_then_the_relay_payload(emu: MetadataEmulator) -> None:
    """GET /sco/v1/notice: 404 until set, then the section-3 payload; raw and clear work."""
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404
    served = emu.sco_notice(id="n-1", kind="reclaim", in_s=90)
    payload = requests.get(emu.url + "/sco/v1/notice", timeout=5).json()
    assert payload == served
    assert set(payload) == {"v", "id", "kind", "node", "instance_id", "issued_at", "deadline",
                            "source"}
    assert payload["v"] == 1 and payload["id"] == "n-1"
    assert parse_rfc3339(payload["deadline"]) - parse_rfc3339(payload["issued_at"]) == \
        pytest.approx(90, abs=1)
    emu.sco_raw({"v": 99, "garbage": True})
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).json() == {"v": 99,
                                                                          "garbage": True}
    emu.sco_clear()
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404
