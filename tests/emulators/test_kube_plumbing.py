"""Watch streams, auth, fault injection, 'down', tables and the control API of the emulator,
all served by the shared emulator shell."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulators._control import ControlError
from tests.emulators.kube import KubeApiServer, Options
from tests.emulators.kube import objects as o
from tests.emulators.kube.client import APF_REJECTION_BODY
from tests.emulators.test_kube_http import Client
from tests.support.wait import wait_for


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(options=Options(grace_cap=0.05), run_controllers=False) as srv:
        yield srv


@pytest.fixture
def api(server: KubeApiServer) -> Iterator[Client]:
    server.reset()
    server.app.seed([o.node("n1"), o.node("n2")])
    client = Client(server)
    yield client
    client.conn.close()


def _watch(server: KubeApiServer, query: str, path: str = "/api/v1/pods") -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", f"{path}?watch=1&{query}")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    return conn, resp


def _events(resp: Any, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        event = json.loads(resp.readline())
        out.append((event["type"], event["object"].get("metadata", {}).get("name", "")))
    return out


def _rv(api: Client) -> str:
    return api.ok("GET", "/api/v1/pods")["metadata"]["resourceVersion"]


# ----- watch -----
def test_watch_from_resource_version_sees_changes_in_order(api: Client) -> None:
    conn, resp = _watch(api.server, f"resourceVersion={_rv(api)}&timeoutSeconds=30")
    api.ok("POST", "/api/v1/namespaces/default/pods", o.pod("p", "n1", phase=None))
    api.ok("PATCH", "/api/v1/namespaces/default/pods/p", {"metadata": {"labels": {"x": "1"}}},
           "application/merge-patch+json")
    api.ok("DELETE", "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0")
    first = json.loads(resp.readline())
    assert first["type"] == "ADDED" and first["object"]["kind"] == "Pod" and first["object"]["apiVersion"] == "v1"
    assert _events(resp, 2) == [("MODIFIED", "p"), ("DELETED", "p")]
    conn.close()


def test_watch_with_selectors_turns_leaving_into_deleted(api: Client) -> None:
    api.server.app.seed([o.pod("mine", "n1", labels={"app": "a"}), o.pod("theirs", "n2", labels={"app": "a"})])
    conn, resp = _watch(api.server, "fieldSelector=spec.nodeName%3Dn1&labelSelector=app%3Da")
    assert _events(resp, 1) == [("ADDED", "mine")]  # no resourceVersion: current state first
    api.ok("PATCH", "/api/v1/namespaces/default/pods/theirs", {"metadata": {"labels": {"b": "1"}}},
           "application/merge-patch+json")
    api.ok("PATCH", "/api/v1/namespaces/default/pods/mine", {"metadata": {"labels": {"app": "z"}}},
           "application/merge-patch+json")
    assert _events(resp, 1) == [("DELETED", "mine")]
    conn.close()


def test_watch_ends_at_timeout(api: Client) -> None:
    conn, resp = _watch(api.server, f"resourceVersion={_rv(api)}&timeoutSeconds=1")
    assert resp.read() == b""  # the chunked stream terminates cleanly
    conn.close()


def test_watch_list_sends_initial_events_then_bookmark(api: Client) -> None:
    api.server.app.seed([o.pod("a", "n1")])
    conn, resp = _watch(api.server, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                                    "&allowWatchBookmarks=true&timeoutSeconds=5")
    assert _events(resp, 1) == [("ADDED", "a")]
    bookmark = json.loads(resp.readline())
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    conn.close()


def test_a_lagging_watch_delivers_each_change_that_long_after_its_write_in_order(api: Client) -> None:
    """``watch_lag``: one resource's watches trail the store; other watches and lists do not."""
    api.server.app.options = Options(grace_cap=0.05, watch_lag={"poddisruptionbudgets": 0.6})
    rv = _rv(api)
    pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    late, late_resp = _watch(api.server, f"resourceVersion={rv}&timeoutSeconds=30", path=pdbs)
    prompt, prompt_resp = _watch(api.server, f"resourceVersion={rv}&timeoutSeconds=30")
    written = time.monotonic()
    api.ok("POST", pdbs, o.pdb("web", {"app": "web"}, max_unavailable=1))
    api.ok("POST", "/api/v1/namespaces/default/pods", o.pod("p", "n1", phase=None))
    assert _events(prompt_resp, 1) == [("ADDED", "p")]
    assert time.monotonic() - written < 0.6                       # the pods' watch is not held
    assert [i["metadata"]["name"] for i in api.ok("GET", pdbs)["items"]] == ["web"]   # a list is current
    assert _events(late_resp, 1) == [("ADDED", "web")]
    assert time.monotonic() - written >= 0.6                      # the PDBs' watch is
    late.close()
    prompt.close()


def test_apf_seats_execute_at_once_the_queue_waits_and_past_it_apf_rejects(api: Client) -> None:
    """``apf_seats``: 1.20's APF answer when the level is full (429, Retry-After 1, plain text)."""
    api.server.app.options = Options(grace_cap=0.05, apf_seats=2, apf_queue=1, apf_service_s=0.6)
    results: list[tuple[int, str, str]] = []

    def get() -> None:
        client = Client(api.server)
        code, body, resp = client.call("GET", "/api/v1/nodes")
        results.append((code, str(resp.getheader("Retry-After")), body if isinstance(body, str) else ""))
        client.conn.close()

    threads = [threading.Thread(target=get) for _ in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(10)
    assert sorted(code for code, _, _ in results) == [200, 200, 200, 429]   # 2 seated, 1 queued, 1 out
    assert [(ra, body) for code, ra, body in results if code == 429] == [("1", APF_REJECTION_BODY)]
    with pytest.raises(ValueError, match="apf_seats"):
        Options(apf_seats=-1)
    with pytest.raises(ValueError, match="watch_lag"):
        Options(watch_lag={"pods": -1.0})


def test_watch_from_compacted_resource_version_is_410() -> None:
    with KubeApiServer(options=Options(history=10), run_controllers=False) as srv:
        srv.app.seed([o.node(f"n{i}") for i in range(20)])
        conn, resp = _watch(srv, "resourceVersion=1", path="/api/v1/nodes")
        event = json.loads(resp.readline())
        assert event["type"] == "ERROR" and event["object"]["code"] == 410
        assert event["object"]["reason"] == "Expired"
        conn.close()


def _connections_become(server: KubeApiServer, n: int) -> bool:
    return wait_for(lambda: server.open_connections == n, 10, f"{n} open connections", interval=0.02, retry_on=())


def test_idle_watch_ends_when_its_client_hangs_up(api: Client) -> None:
    api.conn.close()
    assert _connections_become(api.server, 0)
    conn, _ = _watch(api.server, "timeoutSeconds=600")
    assert api.server.open_connections == 1
    conn.close()
    assert _connections_become(api.server, 0)


def test_malformed_content_length_is_400(api: Client) -> None:
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=5) as sock:
        sock.sendall(b"POST /api/v1/nodes HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")


def test_chunked_request_body_is_read_and_the_connection_stays_usable(api: Client) -> None:
    body = json.dumps(o.pod("chunky", "n1", phase=None)).encode()
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=5) as sock:
        sock.sendall(b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"%x\r\n%s\r\n" % (10, body[:10]) + b"%x\r\n%s\r\n" % (len(body) - 10, body[10:])
                     + b"0\r\n\r\nGET /api/v1/namespaces/default/pods/chunky HTTP/1.1\r\nHost: x\r\n\r\n")
        replies = b""
        while replies.count(b"HTTP/1.1 ") < 2 or not replies.rstrip().endswith(b"}"):
            replies += sock.recv(65536)
    assert replies.startswith(b"HTTP/1.1 201") and b"HTTP/1.1 200" in replies
    assert api.server.requests()[-2]["body"]["metadata"]["name"] == "chunky"


def test_bad_chunk_framing_is_400_and_closes(api: Client) -> None:
    with socket.create_connection(("127.0.0.1", api.server.port), timeout=5) as sock:
        sock.sendall(b"POST /api/v1/nodes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") and b'"kind":"Status"' in reply


def test_watch_as_table_for_kubectl_get_w(api: Client) -> None:
    api.server.app.seed([o.pod("a", "n1")])
    conn = http.client.HTTPConnection("127.0.0.1", api.server.port, timeout=10)
    conn.request("GET", "/api/v1/pods?watch=1&timeoutSeconds=5",
                 headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    event = json.loads(conn.getresponse().readline())
    assert event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][:3] == ["a", "1/1", "Running"]
    conn.close()


# ----- tables -----
def test_node_table_shows_cordon(api: Client) -> None:
    api.ok("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}}, "application/strategic-merge-patch+json")
    code, doc, _ = api.call("GET", "/api/v1/nodes", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert code == 200 and doc["kind"] == "Table"
    assert [c["name"] for c in doc["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Status", "Roles", "Age", "Version"]
    assert [r["cells"][:2] for r in doc["rows"]] == [["n1", "Ready,SchedulingDisabled"], ["n2", "Ready"]]


# ----- auth -----
def test_token_map_refuses_unknown_tokens_and_logs_the_user() -> None:
    with KubeApiServer(options=Options(tokens={"s3cret": "system:node:n1"}), run_controllers=False) as srv:
        api = Client(srv)
        code, doc, _ = api.call("GET", "/api/v1/nodes")
        assert code == 401 and doc["reason"] == "Unauthorized"
        assert api.call("GET", "/api/v1/nodes", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert api.call("GET", "/api/v1/nodes", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert [(e["status"], e["user"]) for e in srv.requests()] == [(401, None), (401, None), (200, "system:node:n1")]


# ----- faults -----
def test_status_fault_fires_count_times_with_a_status_body(api: Client) -> None:
    api.server.fault("status", pattern=r"/nodes/n1$", method="GET", status=503, count=1)
    code, doc, _ = api.call("GET", "/api/v1/nodes/n1")
    assert code == 503 and doc["kind"] == "Status" and doc["reason"] == "ServiceUnavailable"
    assert api.call("GET", "/api/v1/nodes/n1")[0] == 200
    assert [(e["status"], e["fault"]) for e in api.server.requests()] == [(503, "status"), (200, None)]


def test_pattern_matches_the_query_string_too(api: Client) -> None:
    api.server.fault("status", pattern=r"/api/v1/pods\?", status=500)
    assert api.call("GET", "/api/v1/pods")[0] == 200
    assert api.call("GET", "/api/v1/pods?limit=1")[0] == 500


def test_429_fault_carries_retry_after(api: Client) -> None:
    api.server.fault("status", pattern="eviction", method="POST", status=429, retry_after=3)
    api.server.app.seed([o.pod("p", "n1")])
    code, _, resp = api.call("POST", "/api/v1/namespaces/default/pods/p/eviction", {"metadata": {"name": "p"}})
    assert code == 429 and resp.getheader("Retry-After") == "3"
    assert api.call("GET", "/api/v1/namespaces/default/pods/p")[1]["metadata"].get("deletionTimestamp") is None


@pytest.mark.parametrize("rule", [{"mode": "close"}, {"mode": "reset"}, {"mode": "hang", "seconds": 0.2}])
def test_close_reset_and_hang_faults_drop_the_connection(api: Client, rule: dict) -> None:
    api.server.fault(path="/api/v1/nodes", count=1, **rule)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        api.call("GET", "/api/v1/nodes")
    assert api.server.requests()[-1]["status"] is None


def test_delay_fault_then_normal_answer(api: Client) -> None:
    api.server.fault("delay", path="/api/v1/nodes", seconds=0.05)
    assert api.call("GET", "/api/v1/nodes")[0] == 200
    assert api.server.requests()[-1]["fault"] == "delay"


def test_probability_zero_never_fires(api: Client) -> None:
    api.server.fault("status", probability=0.0)
    assert all(api.call("GET", "/api/v1/nodes")[0] == 200 for _ in range(5))


def test_removed_fault_stops_firing(api: Client) -> None:
    rule = api.server.fault("status", status=500)
    assert api.call("GET", "/api/v1/nodes")[0] == 500
    api.server.remove_fault(rule)
    assert api.call("GET", "/api/v1/nodes")[0] == 200 and api.server.faults() == []
    with pytest.raises(ControlError, match="no fault rule"):
        api.server.remove_fault(rule)


def test_down_refuse_then_up_on_the_same_port(api: Client) -> None:
    server = api.server
    server.down("refuse")
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass
    control = http.client.HTTPConnection("127.0.0.1", server.control_port, timeout=5)
    control.request("POST", "/_emu/up")
    assert control.getresponse().status == 200
    assert Client(server).call("GET", "/api/v1/nodes")[0] == 200


def test_down_reset_drops_requests_but_control_answers(api: Client) -> None:
    api.server.down("reset")
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        Client(api.server).call("GET", "/api/v1/nodes")
    assert Client(api.server).call("POST", "/_emu/ping")[1]["result"]["down"] == "reset"
    assert api.server.requests()[-1]["fault"] == "reset"
    api.server.up()
    assert Client(api.server).call("GET", "/api/v1/nodes")[0] == 200


def test_down_ends_a_running_watch(api: Client) -> None:
    conn, resp = _watch(api.server, "timeoutSeconds=600")
    api.server.down("refuse")
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        resp.read()
    conn.close()
    api.server.up()


def test_down_for_seconds_comes_back_by_itself(api: Client) -> None:
    api.server.down("refuse", seconds=0.2)
    wait_for(lambda: api.server.call("ping")["down"] is None, 10, "the service to come back up", interval=0.02)
    assert Client(api.server).call("GET", "/api/v1/nodes")[0] == 200


# ----- control API -----
def test_control_rejects_bad_input_with_400(api: Client) -> None:
    assert api.call("POST", "/_emu/seed", {"objects": [{"kind": "Widget"}]})[0] == 400
    assert api.call("POST", "/_emu/seed", {"objects": "n1"})[0] == 400
    assert api.call("POST", "/_emu/fault", {"mode": "status", "pattern": "("})[0] == 400
    assert api.call("POST", "/_emu/fault", {"mode": "explode"})[0] == 400
    assert api.call("POST", "/_emu/options", {"grace_cap": "soon"})[0] == 400
    assert api.call("POST", "/_emu/options", {"policy_versions": ["v1"]})[0] == 400
    assert api.call("POST", "/_emu/down", {"mode": "sideways"})[0] == 400
    assert api.call("POST", "/_emu/seed", b"{not json")[0] == 400
    assert api.call("GET", "/_emu/nothing")[0] == 404


def test_control_log_since_and_clear(api: Client) -> None:
    api.call("GET", "/api/v1/nodes/n1")
    last = api.server.last_request_seq()
    api.call("DELETE", "/api/v1/nodes/n2?gracePeriodSeconds=0")
    entries = api.server.requests(since=last)
    assert [(e["method"], e["path"], e["query"], e["status"]) for e in entries] == [
        ("DELETE", "/api/v1/nodes/n2", {"gracePeriodSeconds": "0"}, 200)]
    api.server.clear_requests()
    assert api.server.requests() == []
    assert api.server.last_request_seq() == last + 1  # numbering goes on across a clear


def test_reset_restores_options_and_clears_faults(api: Client) -> None:
    api.server.set_options(grace_cap=9)
    api.server.fault("delay", pattern="x")
    api.server.down("reset")
    api.server.reset()
    assert api.server.settings()["grace_cap"] == 0.05
    assert api.server.faults() == [] and api.server.call("ping")["down"] is None
    assert {n["metadata"]["name"] for n in Client(api.server).ok("GET", "/api/v1/namespaces")["items"]} == {
        "default", "kube-system", "kube-public", "kube-node-lease"}


# ----- lists -----
def test_a_list_not_older_than_a_version_is_served_and_its_match_validated_as_the_server_does(api: Client) -> None:
    """The agent confirms an empty node with resourceVersionMatch=NotOlderThan (executor/kube/api.py):
    the server's ListOptions validation refuses the match without a version, with a continue token,
    and Exact with "0" (422 Invalid)."""
    api.server.app.seed([o.pod("a", "n1"), o.pod("b", "n2")])
    rv = _rv(api)
    doc = api.ok("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&resourceVersion={rv}&resourceVersionMatch=NotOlderThan")
    assert [p["metadata"]["name"] for p in doc["items"]] == ["a"]
    for query in ("resourceVersionMatch=NotOlderThan", "resourceVersion=0&resourceVersionMatch=Exact",
                  f"resourceVersion={rv}&resourceVersionMatch=Soon"):
        status, body = api.call("GET", f"/api/v1/pods?{query}")[:2]
        assert status == 422 and body["reason"] == "Invalid" and "resourceVersionMatch" in body["message"], (query, body)
