"""What the server said to one eviction or delete, as the eviction book's ``Answer`` (adapter)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from executor.kube.api import (
    Conflict,
    EvictionUnsupported,
    KubeError,
    NotFound,
    NotOwnNode,
    Throttled,
    TooManyRequests,
    Unreachable,
)
from executor.kube.drain_plan import pdb_from_causes
from executor.kube.eviction_book import Answer


def answer_of(call: Callable[[], None], clock: Callable[[], float] = time.monotonic) -> Answer:
    """The book's answer for one eviction or delete: what the server (or the agent) said, when it
    was sent and how long it took on ``clock`` (monotonic: the book's concurrency limit reads it)."""
    sent = clock()
    answer = _answer_of(call)
    return dataclasses.replace(answer, sent_at=sent, latency_s=clock() - sent)


def _answer_of(call: Callable[[], None]) -> Answer:
    try:
        call()
        return Answer("accepted")
    except (NotFound, Conflict):
        return Answer("gone")   # 409: the UID precondition failed, our pod is gone
    except Throttled as e:
        return Answer("throttled", e.message, retry_after=e.retry_after)
    except TooManyRequests as e:   # PdbRefused
        return Answer("blocked", e.message, pdb_from_causes(e.causes), e.retry_after)
    except KubeError as e:
        return Answer("error", str(e))
    except Unreachable as e:
        return Answer("unreachable", str(e))
    except NotOwnNode as e:
        return Answer("refused", str(e))
    except EvictionUnsupported as e:
        return Answer("unsupported", str(e))
    except Exception as e:  # noqa: BLE001 -- a worker must always answer, or its pod waits forever
        return Answer("error", f"{type(e).__name__}: {e}")
