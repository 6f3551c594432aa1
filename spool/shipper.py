"""Ships spooled events to Vector's http_server source, oldest first, at least once.

A thread of the spool process. It reads a batch from the head of the ring,
POSTs it as NDJSON, and releases it only after a 2xx for every record in it
(or after a record Vector refused alone, again and again, was set aside into
the poison file, spool.poison). While Vector is unreachable or its sink fails
(400 "Contents failed to deliver to sink", 5xx, timeouts) it backs off with
full jitter and sends the same batch again, so records leave in the order
they were written and none is given up. The decisions (what an answer means,
how long to wait, which half to send next) are in spool.shipping; this is
the loop around them.

Idle, it sleeps on the store's ``changed`` event: no wake-ups while nothing
is written.
"""
from __future__ import annotations

import os
import random
import threading
import time

from common.http import HttpClient, HttpError
from common.log import Logger
from common.recorder import Recorder
from common.supervise import Supervised
from common.timefmt import format_rfc3339
from spool import poison
from spool.ring import SpoolIOError
from spool.shipping import (
    OK,
    REFUSED,
    Backoff,
    Bisect,
    ShipPolicy,
    classify,
    message_of,
    retry_after_s,
)
from spool.store import Store

MAX_BATCH_BYTES = 1 << 20
IDLE_WAIT_S = 60.0     # a safety net only: writes wake the shipper
STOP_WAIT_S = 2.0      # a POST still hanging after this is abandoned; the batch ships after restart
RECORD_PREFIX = 2000   # bytes of a set-aside record quoted in its spool.poison event
RECORD_IN_EVENT = 16000  # ... or, when the poison file cannot be written, this much of it
FAILING_REPORT_S = 60.0   # a failing streak: said when it starts, then with its count this often

Answer = tuple[str, int | None, str]   # (verdict, status, message)


class Shipper:
    """The shipping loop in a supervised thread (common.supervise): a bug that ends it -- a record
    of a shape nobody foresaw, say -- restarts it after a pause, counted and said by the spool's
    loop, while the intake goes on taking events; it used to end the whole process, which
    supervisord restarted into the same batch."""

    def __init__(self, store: Store, log: Logger, url: str | None, batch_max: int, *,
                 policy: ShipPolicy | None = None, rng: random.Random | None = None) -> None:
        policy = policy or ShipPolicy()
        self.store = store
        self.log = log
        self.batch_max = batch_max
        self.timeout_s = policy.timeout_s
        self.strikes = policy.poison_strikes
        self.backoff = Backoff(rng or random.Random(), time.monotonic, policy.backoff_base_s, policy.backoff_cap_s)
        self.url = url
        self.poison_path = os.path.join(os.path.dirname(store.path) or ".", poison.POISON_FILE)
        self.worker = Supervised("shipper", self._run)
        self.stopping = self.worker.stopping
        self._client: HttpClient | None = None
        self._client_url: str | None = None
        # ship.failing per (type, reason): this thread's own (a Recorder is not thread-safe).
        self.failing: Recorder[str] = Recorder(lambda type_, data: self.log.warning(type_, **data), FAILING_REPORT_S)
        self.attempts = 0          # POSTs sent, counters for tests and the stop log line
        self.shipped = 0
        self.set_aside = 0

    @property
    def failures(self) -> int:
        """Consecutive failed attempts (drives the backoff)."""
        return self.backoff.failures

    # -- control, from the intake thread --------------------------------------------
    def retarget(self, url: str | None) -> None:
        """Ship to ``url`` from the next request on (None: hold everything)."""
        self.url = url
        self.store.changed.set()

    def start(self) -> Shipper:
        self.worker.start()
        return self

    def is_alive(self) -> bool:
        return self.worker.is_alive()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Stop after the current request; True if the thread ended within ``timeout_s``."""
        self.worker.stop()
        self.store.changed.set()
        return self.worker.join(timeout_s)

    # -- the loop ----------------------------------------------------------------------
    def _run(self, stopping: threading.Event) -> None:
        try:
            self._loop()
        finally:
            self.failing.tick(force=True)   # nothing counted goes unsaid
            if self._client is not None:    # a restart connects afresh
                self._client.close()
                self._client, self._client_url = None, None

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
                self._back_off()
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
        """True once every record is delivered or set aside; False if stopping first or the ring
        dropped records of the batch meanwhile (the loop reads it again)."""
        answer = self._until_answered(batch)
        if answer is None:
            return False
        if answer[0] == OK:
            return True
        search = Bisect.of(len(batch), self.strikes)
        last: dict[int, Answer] = {}
        while (span := search.next_range()) is not None:
            if search.retrying_alone():
                self._back_off()        # the same record refused alone again: not at once
            answer = self._until_answered(batch[span[0]:span[1]])
            if answer is None:
                return False
            if span[1] - span[0] == 1:
                last[span[0]] = answer
            search.result(answer[0] == OK)
        for i in search.bad:
            _, status, message = last[i]
            self._set_aside(batch[i][0], batch[i][1], status, message)
        return True

    def _until_answered(self, records: list[tuple[int, bytes]]) -> Answer | None:
        """POST until Vector takes the records or refuses their content; None when stopping.

        Every other answer (the sink failed, no answer, an endpoint we do not
        understand) keeps the records: back off and send the same again.
        """
        body = b"".join(rec + b"\n" for _, rec in records)
        while not self.stopping.is_set():
            status, message, retry_after = self._post(body)
            verdict = classify(status, message)
            if verdict in (OK, REFUSED):
                self._recovered()
                return verdict, status, message
            self._back_off(retry_after)
            if self._stale(records):
                return None
        return None

    def _stale(self, records: list[tuple[int, bytes]]) -> bool:
        """Did the ring drop the head of these records while we waited (a full file, Vector away)?

        Then they are counted in spool.dropped and must not ship as well: the batch is read again.
        """
        return self.store.head_seq() > records[0][0]

    def _post(self, body: bytes) -> tuple[int | None, str, float | None]:
        client = self._connect()
        if client is None:
            return None, "", None
        self.attempts += 1
        try:
            # The client prefixes its base URL's path (e.g. /events); "/" only for a bare host.
            resp = client.request("POST", "" if client.prefix else "/", body=body, timeout_s=self.timeout_s,
                                  headers={"Content-Type": "application/x-ndjson"})
        except HttpError as e:
            self.failing.record("ship.failing", e.reason, {"reason": e.reason, "detail": e.detail[:200]})
            return None, "", None
        if 200 <= resp.status < 300:
            return resp.status, "", None
        message = message_of(resp.body)
        self.failing.record("ship.failing", f"status_{resp.status}:{message[:60]}", {
            "status": resp.status, "message": message[:200]})
        return resp.status, message, retry_after_s(resp.headers.get("retry-after"), self.backoff.cap)

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

    def _back_off(self, retry_after: float | None = None) -> None:
        delay = self.backoff.next_delay(retry_after)
        self.failing.tick()
        self.stopping.wait(delay)

    def _recovered(self) -> None:
        """The streak ended: say what it counted, then ``ship.recovered``; the next streak is news."""
        self.failing.tick(force=True)
        self.failing.forget_all()
        failures, lasted = self.backoff.reset()
        if failures:
            self.log.info("ship.recovered", failed_attempts=failures, after_s=round(lasted, 3))

    def _release(self, upto_seq: int) -> None:
        try:
            self.store.release(upto_seq)
        except SpoolIOError as e:
            # The head moved in memory; the header is written again at the next sync.
            self.log.error("ship.release_error", error=str(e))

    def _set_aside(self, seq: int, record: bytes, status: int | None, message: str) -> None:
        """Keep the record in the poison file (or, if that fails, in full in the event), then say so."""
        self.set_aside += 1
        item = poison.entry(seq, record, status, message, self.strikes, format_rfc3339(time.time()))
        data = {k: item[k] for k in ("seq", "event_id", "status", "message", "strikes", "bytes")}
        try:
            evicted = poison.append(self.poison_path, item)
            data["kept_in"] = poison.POISON_FILE
            data["record_prefix"] = item["record"][:RECORD_PREFIX]
            if evicted:
                data["poison_evicted"] = evicted
        except OSError as e:
            data["kept_in"] = "event"
            data["poison_file_error"] = str(e)[:200]
            data["record_prefix"] = item["record"][:RECORD_IN_EVENT]
        self.log.error("spool.poison", **{**data, "record_prefix": item["record"][:500]})
        self.store.report("spool.poison", data)
