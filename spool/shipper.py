"""Ships spooled events to Vector's http_server source, oldest first, at least once.

A record is released from the spool only after Vector answers 2xx for the
batch holding it. While Vector is unreachable or answers 5xx/429 the shipper
backs off (capped, jittered) and tries the same batch again; a 4xx batch is
bisected to find the bad record, which is set aside with a
``spool.ship_rejected`` event instead of blocking the spool forever.
"""
from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING

from common.config import Config
from common.http import HttpClient, HttpError
from common.log import Logger
from spool.shipping import Bisect, backoff_s, classify

if TYPE_CHECKING:
    from spool.__main__ import Spool

MAX_BATCH_BYTES = 4 << 20
IDLE_WAIT_S = 0.5
TIMEOUT_S = 10.0


class Shipper(threading.Thread):
    def __init__(self, spool: Spool, config: Config, log: Logger) -> None:
        super().__init__(name="shipper", daemon=True)
        self.spool = spool
        self.log = log
        self.batch_max = config.spool.batch_max
        self.http = HttpClient(config.spool.vector_url, timeout_s=TIMEOUT_S, max_body=64 << 10)
        self.path = self.http.prefix or "/"
        self.http.prefix = ""
        self.stopping = threading.Event()
        self.rng = random.Random()
        self.failures = 0
        self.shipped = 0
        self.set_aside = 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=TIMEOUT_S + 1)

    def _post(self, records: list[bytes]) -> int | None:
        body = b"\n".join(records) + b"\n"
        try:
            resp = self.http.request("POST", self.path, body=body,
                                     headers={"Content-Type": "application/x-ndjson"})
        except HttpError as e:
            self.log.warning("ship.error", reason=e.reason, detail=e.detail[:200])
            return None
        return resp.status

    def run(self) -> None:
        while not self.stopping.is_set():
            ring = self.spool.ring
            if ring is None:
                self.stopping.wait(IDLE_WAIT_S)
                continue
            with self.spool.lock:
                batch = ring.read_unshipped(self.batch_max, MAX_BATCH_BYTES)
            if not batch:
                self.stopping.wait(IDLE_WAIT_S)
                continue
            verdict = classify(self._post([rec for _, rec in batch]))
            if verdict == "retry":
                self.failures += 1
                self.stopping.wait(backoff_s(self.failures, self.rng))
                continue
            self.failures = 0
            if verdict == "reject" and not self._bisect(batch):
                continue
            with self.spool.lock:
                ring.release(batch[-1][0])
            self.shipped += len(batch)

    def _bisect(self, batch: list[tuple[int, bytes]]) -> bool:
        """Ship the good records of a rejected batch; True once all are delivered or set aside."""
        search = Bisect.of(len(batch))
        while (rng := search.next_range()) is not None:
            if self.stopping.is_set():
                return False
            lo, hi = rng
            verdict = classify(self._post([rec for _, rec in batch[lo:hi]]))
            if verdict == "retry":
                self.failures += 1
                self.stopping.wait(backoff_s(self.failures, self.rng))
                continue   # same range again
            search.result(verdict == "ok")
        for i in search.bad:
            self.set_aside += 1
            self.log.error("spool.ship_rejected", seq=batch[i][0], record=batch[i][1][:500].decode(errors="replace"))
            self.spool.own_event("spool.ship_rejected",
                                 {"seq": batch[i][0], "record_prefix": batch[i][1][:200].decode(errors="replace")})
        return True
