"""AWS EC2 instance metadata, IMDSv2 (token first, then every GET carries it).

Spot interruption: ``spot/instance-action`` is 404 until AWS decides to take
the instance, then ``{"action": "terminate|stop|hibernate", "time": ...}``.
The notice id is derived from the instance and the action time, so every 5 s
poll of the same interruption yields the same notice.
"""
from __future__ import annotations

import ujson

from common.config import Config
from common.http import HttpClient, HttpError
from common.notice import Notice, derived_id
from common.timefmt import parse_rfc3339
from watcher.providers import MetadataError, PollResult

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
INSTANCE_ID = "/latest/meta-data/instance-id"
# Renew the token this long before it expires, so no poll ever carries a dead one.
TOKEN_RENEW_MARGIN_S = 60.0


class Source:
    name = "aws"

    def __init__(self, config: Config, http: HttpClient | None = None) -> None:
        self.node = config.node.name
        self.instance_id = config.node.instance_id
        self.ttl = config.metadata.imds_token_ttl_s
        self.allow_v1 = config.metadata.allow_imdsv1
        self.http = http or HttpClient(config.metadata.url, timeout_s=config.metadata.timeout_s,
                                       max_body=config.metadata.max_body)
        self.token = ""
        self.token_expires = 0.0

    def poll(self, now: float) -> PollResult:
        if not self.instance_id:
            self.instance_id = self._get(INSTANCE_ID, now).decode("ascii", "replace").strip()[:64]
        body = self._get(INSTANCE_ACTION, now, missing_ok=True)
        if body is None:
            return PollResult()
        return PollResult(notices=[self.parse_instance_action(body, now)])

    def parse_instance_action(self, body: bytes, now: float) -> Notice:
        try:
            doc = ujson.loads(body)
            action = doc["action"]
            when = parse_rfc3339(doc["time"])
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataError("bad_body", f"spot/instance-action: {e}") from None
        if action not in ("terminate", "stop", "hibernate"):
            raise MetadataError("bad_body", f"spot/instance-action: unknown action {str(action)[:32]!r}")
        return Notice(
            id=derived_id("aws", self.instance_id, "reclaim", doc["time"]),
            kind="reclaim", node=self.node, instance_id=self.instance_id,
            # AWS gives the action time only; the notice is issued two minutes before it.
            issued_at=when - 120.0, deadline=when, source="aws", channel="metadata",
            received_at=now, detail=action,
        )

    def _get(self, path: str, now: float, missing_ok: bool = False) -> bytes | None:
        for attempt in (1, 2):
            headers = {}
            token = self._token(now)
            if token:
                headers["X-aws-ec2-metadata-token"] = token
            try:
                resp = self.http.request("GET", path, headers=headers)
            except HttpError as e:
                raise MetadataError(e.reason, e.detail) from None
            if resp.status == 401 and attempt == 1:
                # Token expired or the service restarted: drop it and get a new one once.
                self.token, self.token_expires = "", 0.0
                continue
            if resp.status == 200:
                return resp.body
            if resp.status == 404 and missing_ok:
                return None
            raise MetadataError(f"http_{resp.status}", f"GET {path}")
        raise MetadataError("http_401", f"GET {path}: token refused twice")

    def _token(self, now: float) -> str:
        if self.token and now < self.token_expires - TOKEN_RENEW_MARGIN_S:
            return self.token
        try:
            resp = self.http.request("PUT", TOKEN_PATH,
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)},
                                     max_body=4096)
        except HttpError as e:
            if self.allow_v1:
                return ""
            raise MetadataError(e.reason, f"token: {e.detail}") from None
        if resp.status != 200 or not resp.body:
            if self.allow_v1:
                return ""
            raise MetadataError(f"http_{resp.status}", "token request refused")
        self.token = resp.body.decode("ascii", "replace").strip()
        self.token_expires = now + self.ttl
        return self.token
