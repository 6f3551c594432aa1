"""What the server said to one eviction or delete, as the eviction book's ``Answer`` (adapter)."""
from __future__ import annotations

import dataclasses
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
from executor.kube.pod_state import Answer


def answer_of(call: Callable[[], object], sent_at: float, heard_at: float) -> Answer:
    """The book's answer for one eviction or delete: what the server (or the agent) said when
    ``call`` reads it, sent at ``sent_at`` and heard at ``heard_at`` (monotonic: the book's
    concurrency limit reads the latency)."""
    return dataclasses.replace(_answer_of(call), sent_at=sent_at, latency_s=max(0.0, heard_at - sent_at))


def answer_raising(error: Exception, sent_at: float, heard_at: float) -> Answer:
    """``answer_of`` a call that failed with ``error`` before any answer (refused, unreachable)."""
    def call() -> None:
        raise error
    return answer_of(call, sent_at, heard_at)


def _answer_of(call: Callable[[], object]) -> Answer:
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
