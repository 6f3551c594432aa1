"""The on-premises hall's own metadata endpoint (DESIGN section 4, ``sco``).

``GET /sco/v1/notice`` returns the relay payload of DESIGN section 3, or 404
when there is no notice. It is validated by the very function that validates
the relay, so the two channels cannot disagree on what a notice is; a
``cancel`` served here withdraws like one heard on the relay.
"""
from __future__ import annotations

from common.config import Config
from common.http import HttpClient
from common.notice import Rejected, parse_relay_payload
from watcher.providers import BaseSource, MetadataError, PollResult, Wake

PATH = "/sco/v1/notice"


def parse_notice_body(body: bytes, limit: int, now: float) -> PollResult:
    """The endpoint's body -> one notice, or MetadataError("rejected_<reason>")."""
    try:
        notice = parse_relay_payload(body, limit)
    except Rejected as e:
        raise MetadataError(f"rejected_{e.reason}", e.detail) from None
    return PollResult(notices=[notice.with_arrival("metadata", now)])


class Source(BaseSource):
    name = "sco"

    def __init__(self, config: Config, http: HttpClient | None = None, wake: Wake | None = None) -> None:
        super().__init__(config, http, wake)
        self.limit = config.relay.max_payload   # the relay's rule: one notice, one size limit

    def poll(self, now: float) -> PollResult:
        body = self.fetch("GET", PATH, headers={"Accept": "application/json"}, missing_ok=True)
        if body is None:
            return PollResult()
        return parse_notice_body(body, self.limit, now)
