"""The pod watcher's request pattern against a scripted client: list at RV=0, watch from the list's
resourceVersion, resume a watch the server ended, list again on 410, wait Retry-After when throttled."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from executor.kube.api import KubeError, Throttled, Unreachable
from executor.kube.pod_watcher import PodWatcher
from tests.support.wait import wait_for


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "resourceVersion": rv},
            "spec": {"nodeName": "n1"}}


class ScriptedApi:
    """A KubeApi stand-in: each list/watch call takes the next scripted answer and is recorded."""

    node = "n1"

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[tuple[str, str]] = []
        self.idle = threading.Event()

    def list_pods_at(self, rv: str = "") -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("list", rv))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch_pods(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        self.calls.append(("watch", rv))
        if not self.watches:
            self.idle.set()
            self.idle.wait(30)   # a quiet watch: held open until stop_watch
            return
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        yield from answer

    def stop_watch(self) -> None:
        self.idle.set()

    def close(self) -> None:
        pass


def run(api: ScriptedApi) -> PodWatcher:
    w = PodWatcher(lambda: api, lambda: None).start()   # type: ignore[arg-type, return-value]
    wait_for(api.idle.is_set, 20, f"the script played out ({api.calls})")
    return w


def test_list_from_the_cache_then_watch_resume_and_relist_after_410():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    api = ScriptedApi(
        lists=[([pod("a", "5")], "10"), ([pod("b", "30")], "31")],
        watches=[[{"type": "ADDED", "object": pod("c", "11")}],   # the server ends this watch
                 [gone]])
    w = run(api)
    assert api.calls == [("list", "0"), ("watch", "10"), ("watch", "11"), ("list", "0"), ("watch", "31")]
    assert [p["metadata"]["name"] for p in w.pods() or []] == ["b"]
    w.stop()


def test_a_throttled_list_is_raised_to_the_drain_and_retried_after_retry_after():
    throttled = Throttled(429, "TooManyRequests", "Too many requests, please try again later.")
    throttled.retry_after = 0.2
    api = ScriptedApi(lists=[throttled, ([pod("a", "5")], "6")], watches=[])
    seen: list[Exception] = []
    w = PodWatcher(lambda: api, lambda: None)   # type: ignore[arg-type, return-value]
    original = w._set

    def spy(failure: Exception | None) -> None:
        if failure is not None:
            seen.append(failure)
        original(failure)
    w._set = spy   # type: ignore[method-assign]
    w.start()
    wait_for(api.idle.is_set, 20, f"the script played out ({api.calls})")
    assert seen == [throttled] and api.calls == [("list", "0"), ("list", "0"), ("watch", "6")]
    assert [p["metadata"]["name"] for p in w.pods() or []] == ["a"]
    w.stop()


def test_while_unanswered_the_drain_sees_the_failure():
    api = ScriptedApi(lists=[Unreachable("refused")] * 3 + [([], "1")], watches=[])
    w = PodWatcher(lambda: api, lambda: None)   # type: ignore[arg-type, return-value]
    w.start()

    def failing() -> bool:
        try:
            w.pods()
        except Unreachable:
            return True
        return False
    # Retried every RETRY_S: the failure stays visible to the drain for a second at a time.
    wait_for(failing, 10, "the watcher's failure raised to the drain")
    wait_for(api.idle.is_set, 30, f"the script played out ({api.calls})")
    assert w.pods() == []
    w.stop()


def test_a_watch_thread_that_dies_of_an_unexpected_exception_says_so_then_lists_afresh():
    """Issue 26, point 7: the thread used to end, and the view it left stopped moving while the drain
    still trusted it. Now ``pods()`` raises meanwhile (the drain's failed-list path), and the
    restarted thread lists again and follows the node."""
    gone = threading.Event()

    class Api(ScriptedApi):
        def watch_pods(self, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
            if self.calls.count(("watch", "10")) == 0 and rv == "10":
                self.calls.append(("watch", rv))
                yield {"type": "DELETED", "object": pod("a", "11")}
                gone.wait(10)
                raise RuntimeError("a bug in the client")
            yield from super().watch_pods(rv, timeout_s)

    api = Api(lists=[([pod("a", "10")], "10"), ([pod("b", "20")], "20")], watches=[])
    w = PodWatcher(lambda: api, lambda: None).start()   # type: ignore[arg-type, return-value]
    try:
        wait_for(lambda: w.pods() == [], 10, "the deletion applied")
        gone.set()
        # Said at once, for the 0.5 s before the restart (common.supervise.FIRST_PAUSE_S).
        seen = wait_for(lambda: isinstance(_pods_or_error(w), KubeError) and _pods_or_error(w), 10, "the crash")
        assert "WatchCrashed" in str(seen) and "RuntimeError: a bug in the client" in str(seen)
        assert w.worker.restarts == 1
        wait_for(lambda: _pods_or_error(w) == [pod("b", "20")], 10, "the new list")
        assert [c for c in api.calls if c[0] == "list"] == [("list", "0"), ("list", "0")]
    finally:
        w.stop()


def _pods_or_error(w: PodWatcher) -> Any:
    try:
        return w.pods()
    except Exception as e:  # noqa: BLE001 -- the test looks at what was raised
        return e
