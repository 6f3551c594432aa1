"""watcher.asyncio_import and watcher.in_thread: asyncio without logging, traceback and concurrent.futures.

In a fresh interpreter (what is imported is the point): the stand-ins are what asyncio holds,
they carry the real modules' values, and each path that needs the real module still works and
loads it then. Against a real nats-server: a running watcher connects, hears the relay, hears it
again after the server restarts, polls its metadata source, and has loaded none of them, with no
pool thread waiting.
"""
from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import threading

import pytest

from tests.support import authkit
from tests.support.agent_rig import REPO
from tests.support.nats_rig import NatsServer
from tests.support.wait import wait_for
from tests.watcher.rig import WatcherRig
from tests.watcher.test_relay import publish_with_client
from tests.watcher.test_watcher_process import NODE_SUBJECT, payload
from watcher.in_thread import in_thread
from watcher.stand_in import pkgutil_stand_in

KEPT_OUT = ("logging", "traceback", "textwrap", "concurrent.futures", "asyncio.sslproto", "asyncio.staggered")

CHILD = r"""
import json, sys
KEPT = sys.argv[1].split(",")
from watcher.asyncio_import import asyncio
from watcher.in_thread import in_thread
from watcher.stand_in import pkgutil_stand_in
from watcher.stand_in import Deferred, DeferredLogger, futures_stand_in, logging_stand_in
out = {"after_import": sorted(m for m in KEPT if m in sys.modules)}
out["held"] = [type(sys.modules["asyncio.futures"].logging) is Deferred,
               type(sys.modules["asyncio.log"].logger) is DeferredLogger,
               type(sys.modules["asyncio.base_events"].traceback) is Deferred,
               type(sys.modules["asyncio.tasks"].concurrent.futures) is Deferred,
               type(sys.modules["asyncio.selector_events"].sslproto) is Deferred,
               type(asyncio.staggered) is Deferred]
out["in_thread"] = asyncio.run(in_thread("probe", lambda a, b: a + b, 40, 2))
out["after_in_thread"] = sorted(m for m in KEPT if m in sys.modules)

# A loop in debug mode records where each future was made: the real traceback, at that point.
async def made_here():
    return [f.name for f in asyncio.get_running_loop().create_future()._source_traceback[-2:]]
out["debug_source"] = asyncio.run(made_here(), debug=True)
out["after_debug"] = sorted(m for m in KEPT if m in sys.modules)

# An error reaching the loop's default handler is logged (logging's last-resort handler: stderr).
async def report():
    asyncio.get_running_loop().call_exception_handler({"message": "probe: reported through asyncio's logger"})
asyncio.run(report())
out["after_report"] = sorted(m for m in KEPT if m in sys.modules)

out["to_thread"] = asyncio.run(asyncio.to_thread(lambda: 7))
out["after_to_thread"] = sorted(m for m in KEPT if m in sys.modules)

import concurrent.futures, logging, traceback
out["real_after"] = [not isinstance(m, Deferred) for m in (logging, traceback, concurrent.futures)]
out["asyncio_sees_real"] = sys.modules["asyncio.tasks"].concurrent.futures is concurrent.futures
values = {**vars(logging_stand_in()), **vars(futures_stand_in())}
out["values"] = {k: [v, getattr(logging if hasattr(logging, k) else concurrent.futures, k)]
                 for k, v in values.items() if k.isupper()}
out["logger"] = sys.modules["asyncio.log"].logger.name

# logging configured now: asyncio's debug records reach it through the deferred logger.
class Keep(logging.Handler):
    def emit(self, record):
        seen.append(record.getMessage())
seen = []
logging.getLogger("asyncio").addHandler(Keep())
logging.getLogger("asyncio").setLevel(logging.DEBUG)
asyncio.new_event_loop().close()
out["debug_records"] = seen
print(json.dumps(out))
"""


def run_child(code: str) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", code, ",".join(KEPT_OUT)], env=dict(os.environ, PYTHONPATH=REPO),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), out.stderr


def test_asyncio_is_imported_without_them_and_each_loads_when_used():
    r, stderr = run_child(CHILD)
    assert r["after_import"] == [] and all(r["held"]), r
    assert r["in_thread"] == 42 and r["after_in_thread"] == []     # the watcher's blocking calls need no pool
    assert r["debug_source"] == ["made_here", "create_future"]    # as with asyncio imported plainly
    assert r["after_debug"] == ["textwrap", "traceback"]
    assert "probe: reported through asyncio's logger" in stderr   # the real logging wrote it
    assert "logging" in r["after_report"] and "concurrent.futures" not in r["after_report"]
    assert r["to_thread"] == 7 and "concurrent.futures" in r["after_to_thread"]
    assert all(r["real_after"]) and r["asyncio_sees_real"]        # later importers get the real modules
    assert r["values"] and all(mine == real for mine, real in r["values"].values()), r["values"]
    assert set(r["values"]) >= {"DEBUG", "ERROR", "FIRST_COMPLETED", "ALL_COMPLETED", "FIRST_EXCEPTION"}
    assert r["logger"] == "asyncio"
    assert r["debug_records"] == ["Using selector: EpollSelector"]   # asyncio's, at every new loop


def test_in_thread_returns_raises_and_runs_off_the_loop():
    async def main() -> tuple[str, str]:
        name = await in_thread("probe-thread", lambda: threading.current_thread().name)
        with pytest.raises(ValueError, match="bad round"):
            await in_thread("probe-thread", _raise, ValueError("bad round"))
        return name, threading.current_thread().name
    assert asyncio.run(main()) == ("probe-thread", "MainThread")


def _raise(e: Exception) -> None:
    raise e


def test_in_thread_cancelled_drops_the_outcome_and_the_loop_goes_on():
    release, finished = threading.Event(), threading.Event()

    def slow() -> int:
        release.wait(10)
        finished.set()
        return 1

    async def main() -> list[dict]:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        task = asyncio.create_task(in_thread("probe-slow", slow))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        while not finished.is_set():   # the call ends in its thread; its result has nowhere to go
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)      # the settle callback it scheduled runs on this loop
        return errors
    assert asyncio.run(main()) == []


@pytest.mark.parametrize("extra", ["none", "a directory", "a .pkg file", "a zip"])
def test_the_pkgutil_stand_in_extends_a_path_as_pkgutil_does(tmp_path, monkeypatch, extra):
    import pkgutil
    import zipfile

    import nats
    if extra == "a directory":
        (tmp_path / "nats").mkdir()
    elif extra == "a .pkg file":
        (tmp_path / "nats.pkg").write_text(f"# listed\n{tmp_path / 'elsewhere'}\n")
    elif extra == "a zip":
        with zipfile.ZipFile(tmp_path / "more.zip", "w") as z:
            z.writestr("nats/__init__.py", "")
    entry = str(tmp_path / "more.zip") if extra == "a zip" else str(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, entry] if extra != "none" else list(sys.path))
    path = list(nats.__path__[:1])
    mine = pkgutil_stand_in().extend_path(path, "nats")
    assert mine == pkgutil.extend_path(path, "nats") and mine is not path
    assert (len(mine) > 1) == (extra != "none")


def os_threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_running_watcher_hears_reconnects_and_polls_without_them(tmp_path, emu):
    nats = NatsServer(str(tmp_path / "nats.log")).start()
    # By name: nats-py's connection resolves it through the loop (watcher.event_loop), and
    # http.client's through getaddrinfo and its idna codec (watcher.idna_codec).
    relay = nats.url.replace("127.0.0.1", "localhost")
    rig = WatcherRig(tmp_path / "w", relay=[relay], provider="sco", url=emu.url.replace("127.0.0.1", "localhost"),
                     probe=True)
    try:
        rig.start()
        rig.wait_counter("relay.connected", timeout=15)
        nats.publish(NODE_SUBJECT, payload("n-1"))
        assert rig.wait_notice(lambda n: n["id"] == "n-1")["channel"] == "relay"

        nats.stop()
        rig.wait_counter("relay.disconnected")
        nats.start()   # the same port
        rig.wait_counter("relay.reconnected", timeout=15)
        nats.publish(NODE_SUBJECT, payload("n-2"))
        assert rig.wait_notice(lambda n: n["id"] == "n-2")["channel"] == "relay"

        emu.sco_notice(id="n-3", node="node-a", in_s=300)   # the metadata poll, through in_thread
        assert rig.wait_notice(lambda n: n["id"] == "n-3")["channel"] == "metadata"

        modules, threads = rig.loaded()
        assert {"asyncio", "nats.aio.client", "watcher.asyncio_import"} <= modules
        assert {"watcher.event_loop", "watcher.idna_codec"} <= modules
        kept_out = {*KEPT_OUT, "nats.js.client", "importlib.metadata", "pkgutil", "encodings.idna", "unicodedata"}
        assert not modules & kept_out, sorted(modules & kept_out)
        # Between two polls: the main thread and zmq's two (I/O, reaper), no pool thread waiting.
        assert threads in (["MainThread"], ["MainThread", "metadata-poll"])
        assert rig.proc is not None
        pid = rig.proc.pid
        wait_for(lambda: os_threads(pid) == 3, 10, "3 threads between two polls", interval=0.005)
    finally:
        rig.stop()
        nats.stop()


def test_a_running_watcher_on_a_tls_relay_loads_sslproto_when_it_connects(tmp_path):
    paths = authkit.tls_setup(str(tmp_path))
    nats = NatsServer(str(tmp_path / "nats.log"), args=["-c", paths["tls.conf"]]).start()
    url = f"tls://127.0.0.1:{nats.port}"
    tls = {"tls_ca": paths["ca.pem"], "tls_cert": paths["client.pem"], "tls_key": paths["client-key.pem"]}
    rig = WatcherRig(tmp_path / "w", relay=[url], extra={"relay": tls}, probe=True)
    try:
        rig.start()
        rig.wait_counter("relay.connected", timeout=15)
        ctx = ssl.create_default_context(cafile=paths["ca.pem"])
        ctx.load_cert_chain(paths["client.pem"], paths["client-key.pem"])
        publish_with_client(url, NODE_SUBJECT, payload("n-tls"), tls=ctx)
        assert rig.wait_notice(lambda n: n["id"] == "n-tls")["channel"] == "relay"
        modules, _ = rig.loaded()
        assert "asyncio.sslproto" in modules            # the real one, imported at the TLS handshake
        assert not modules & {"logging", "traceback", "concurrent.futures"}, sorted(modules)
    finally:
        rig.stop()
        nats.stop()
