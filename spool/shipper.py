"""Ships spooled events to Vector's http_server source, oldest first, at least once.

A thread of the spool process. It reads a batch from the head of the ring,
POSTs it as NDJSON, and releases it only after a 2xx for every record in it
(or after a record was proven unacceptable and set aside). While Vector is
unreachable or answers "later" it backs off and sends the same batch again,
so records leave in the order they were written. The decisions (what an
answer means, how long to wait, which half to send next) are in
spool.shipping; this is the loop around them.

Idle, it sleeps on the store's ``changed`` event: no wake-ups while nothing
is written.
"""
from __future__ import annotations

import random
import threading
import time

from common.http import HttpClient, HttpError
from common.log import Logger
from common.recorder import Recorder
from spool.ring import SpoolIOError
from spool.shipping import (
    Bisect,
    ShipPolicy,
    backoff_s,
    classify,
    retry_after_s,
)
from spool.store import Store

MAX_BATCH_BYTES = 1 << 20
IDLE_WAIT_S = 60.0     # a safety net only: writes wake the shipper
STOP_WAIT_S = 2.0      # a POST still hanging after this is abandoned; the batch ships after restart
RECORD_PREFIX = 200    # bytes of a set-aside record quoted in its spool.ship_rejected event
FAILING_REPORT_S = 60.0   # a failing streak: said when it starts, then with its count this often


class Shipper(threading.Thread):
    def __init__(self, store: Store, log: Logger, url: str | None, batch_max: int, *,
                 policy: ShipPolicy | None = None, rng: random.Random | None = None) -> None:
        super().__init__(name="shipper", daemon=True)
        policy = policy or ShipPolicy()
        self.store = store
        self.log = log
        self.batch_max = batch_max
        self.timeout_s = policy.timeout_s
        self.backoff = (policy.backoff_base_s, policy.backoff_cap_s)
        self.rng = rng or random.Random()
        self.url = url
        self.stopping = threading.Event()
        self._client: HttpClient | None = None
        self._client_url: str | None = None
        self.failures = 0          # consecutive failed attempts (drives the backoff)
        self.failing_since = 0.0
        # ship.failing per (type, reason): this thread's own (a Recorder is not thread-safe).
        self.failing = Recorder(lambda type_, data: self.log.warning(type_, **data), FAILING_REPORT_S)
        self.attempts = 0          # POSTs sent, counters for tests and the stop log line
        self.shipped = 0
        self.set_aside = 0
        self.crashed = ""          # set if the loop died of a bug: the process then exits to be restarted

    # -- control, from the intake thread --------------------------------------------
    def retarget(self, url: str | None) -> None:
        """Ship to ``url`` from the next request on (None: hold everything)."""
        self.url = url
        self.store.changed.set()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Stop after the current request; True if the thread ended within ``timeout_s``."""
        self.stopping.set()
        self.store.changed.set()
        if self.is_alive():
            self.join(timeout_s)
        return not self.is_alive()

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._loop()
        except Exception as e:   # noqa: BLE001 -- reported to the intake loop, which exits for a clean restart
            self.crashed = f"{type(e).__name__}: {e}"
            self.log.error("ship.crashed", error=self.crashed[:500])
        finally:
            self.failing.tick(force=True)   # nothing counted goes unsaid
            if self._client is not None:
                self._client.close()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            # Cleared before looking at the URL and the ring: a retarget or write after this wakes us.
            self.store.changed.clear()
            if self.url is None:
                self._idle()
                continue
            try:
                batch = self.store.read_unshipped(self.batch_max, MAX_BATCH_BYTES)
            except SpoolIOError as e:
                self.log.error("ship.read_error", error=str(e))
                self._back_off(None)
                continue
            if not batch:
                self._idle()
                continue
            if self._deliver(batch):
                self._release(batch[-1][0])
                self.shipped += len(batch)

    def _idle(self) -> None:
        self.store.changed.wait(IDLE_WAIT_S)

    def _deliver(self, batch: list[tuple[int, bytes]]) -> bool:
        """True once every record is delivered or set aside; False if stopping first."""
        ok = self._until_answered(batch)
        if ok is None:
            return False
        if ok:
            return True
        search = Bisect.of(len(batch))
        while (span := search.next_range()) is not None:
            ok = self._until_answered(batch[span[0]:span[1]])
            if ok is None:
                return False
            search.result(ok)
        for i in search.bad:
            self._set_aside(*batch[i])
        return True

    def _until_answered(self, records: list[tuple[int, bytes]]) -> bool | None:
        """POST until Vector takes (True) or refuses (False) the records; None when stopping."""
        body = b"".join(rec + b"\n" for _, rec in records)
        while not self.stopping.is_set():
            status, retry_after = self._post(body)
            verdict = classify(status)
            if verdict != "retry":
                self._recovered()
                return verdict == "ok"
            self._back_off(status, retry_after)
        return None

    def _post(self, body: bytes) -> tuple[int | None, float | None]:
        client = self._connect()
        if client is None:
            return None, None
        self.attempts += 1
        try:
            # The client prefixes its base URL's path (e.g. /events); "/" only for a bare host.
            resp = client.request("POST", "" if client.prefix else "/", body=body, timeout_s=self.timeout_s,
                                  headers={"Content-Type": "application/x-ndjson"})
        except HttpError as e:
            self.failing.record("ship.failing", e.reason, {"reason": e.reason, "detail": e.detail[:200]})
            return None, None
        if not 200 <= resp.status < 300:
            self.failing.record("ship.failing", f"status_{resp.status}", {
                "status": resp.status, "body": resp.body[:200].decode(errors="replace")})
        return resp.status, retry_after_s(resp.headers.get("retry-after"), self.backoff[1])

    def _connect(self) -> HttpClient | None:
        url = self.url
        if url != self._client_url:
            if self._client is not None:
                self._client.close()
            self._client, self._client_url = None, url
            if url is not None:
                try:
                    self._client = HttpClient(url, timeout_s=self.timeout_s, max_body=64 << 10)
                except ValueError as e:
                    self.log.error("ship.bad_url", url=url, error=str(e))
        return self._client

    def _back_off(self, status: int | None, retry_after: float | None = None) -> None:
        if not self.failures:
            self.failing_since = time.monotonic()
        delay = backoff_s(self.failures, self.rng, *self.backoff)
        if retry_after is not None:
            delay = max(delay, retry_after)
        self.failures += 1
        self.failing.tick()
        self.stopping.wait(delay)

    def _recovered(self) -> None:
        """The streak ended: say what it counted, then ``ship.recovered``; the next streak is news."""
        self.failing.tick(force=True)
        self.failing.forget_all()
        if self.failures:
            self.log.info("ship.recovered", failed_attempts=self.failures,
                          after_s=round(time.monotonic() - self.failing_since, 3))
        self.failures = 0

    def _release(self, upto_seq: int) -> None:
        try:
            self.store.release(upto_seq)
        except SpoolIOError as e:
            # The head moved in memory; the header is written again at the next sync.
            self.log.error("ship.release_error", error=str(e))

    def _set_aside(self, seq: int, record: bytes) -> None:
        self.set_aside += 1
        prefix = record[:RECORD_PREFIX].decode(errors="replace")
        self.log.error("spool.ship_rejected", seq=seq, record=record[:500].decode(errors="replace"))
        self.store.report("spool.ship_rejected", {"seq": seq, "bytes": len(record), "record_prefix": prefix})
