"""watcher.event_loop and watcher.idna_codec: name lookups off the loop without asyncio's pool, and
the idna codec for ASCII host names without encodings.idna -- each the same answers as the real one."""
from __future__ import annotations

import encodings.idna
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.agent_rig import REPO
from watcher import event_loop, idna_codec
from watcher.asyncio_import import asyncio
from watcher.in_thread import in_thread

NAMES = ["", "localhost", "relay.example-hall-1.internal", "Relay.EXAMPLE.com", "a.", "a..b", ".a", "..",
         "x" * 63 + ".com", "x" * 64 + ".com", "com." + "x" * 63, "com." + "x" * 64, "169.254.169.254",
         "bücher.example", "xn--bcher-kva.example", "例え.テスト", "a\u3002b"]


def outcome(call, *args):
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 -- the exception is the outcome compared
        return type(e)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("errors", ["strict", "ignore"])
def test_the_codec_encodes_as_the_real_one(name, errors):
    real = encodings.idna.Codec().encode
    assert outcome(idna_codec.encode, name, errors) == outcome(real, name, errors)


def test_decoding_and_the_incremental_and_stream_codecs_are_the_real_ones():
    info, real = idna_codec.codec_info(), encodings.idna.getregentry()
    assert info.decode(b"xn--bcher-kva.example") == real.decode(b"xn--bcher-kva.example")
    assert info.incrementalencoder().encode("bücher.example", final=True) == b"xn--bcher-kva.example"
    assert info.incrementaldecoder().decode(b"xn--bcher-kva.example", final=True) == "bücher.example"
    out = io.BytesIO()
    info.streamwriter(out).write("bücher.example")
    assert out.getvalue() == b"xn--bcher-kva.example"
    assert info.streamreader(io.BytesIO(b"xn--bcher-kva")).read() == "bücher"


def test_run_returns_once_a_call_cut_off_by_the_stop_has_ended():
    started, finished = threading.Event(), threading.Event()

    def acknowledge() -> None:   # e.g. a drain acknowledgement in flight when the watcher stops
        started.set()
        time.sleep(0.2)
        finished.set()

    async def main() -> None:
        task = asyncio.ensure_future(in_thread("probe-ack", acknowledge))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
    event_loop.run(main())
    assert finished.is_set()


CHILD = r"""
import codecs, json, socket, sys, threading, time
from watcher import event_loop
from watcher.asyncio_import import asyncio
KEPT = ("encodings.idna", "stringprep", "unicodedata", "concurrent.futures", "logging")
out = {}

async def lookups():
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    name = await loop.getnameinfo(("127.0.0.1", 80))
    reader_writer = await asyncio.open_connection("localhost", int(sys.argv[1]))   # resolved by the loop
    reader_writer[1].close()
    return type(loop).__name__, found, name

kind, found, name = event_loop.run(lookups())
out["loop"] = kind
out["same"] = [found == socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM),
               name == socket.getnameinfo(("127.0.0.1", 80), 0)]
out["loaded"] = [m for m in KEPT if m in sys.modules]
for _ in range(1000):   # the lookups' threads end just after handing their results over
    if threading.active_count() == 1:
        break
    time.sleep(0.01)
out["threads"] = threading.active_count()
out["idna"] = "bücher.example".encode("idna").decode()   # non-ASCII: the real codec, imported now
import encodings.idna
out["real_module"] = hasattr(encodings.idna, "ToASCII") and codecs.lookup("idna").name == "idna"
out["loaded_after"] = [m for m in KEPT if m in sys.modules]
print(json.dumps(out))
"""


def test_the_loop_resolves_off_the_pool_and_the_codec_without_encodings_idna():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = subprocess.run([sys.executable, "-c", CHILD, str(port)], env=dict(os.environ, PYTHONPATH=REPO),
                              capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert r["loop"] == "WatcherLoop" and all(r["same"]), r
    assert r["loaded"] == [] and r["threads"] == 1, r      # no pool, no pool thread, no encodings.idna
    assert r["idna"] == "xn--bcher-kva.example" and r["real_module"]
    assert r["loaded_after"] == ["encodings.idna", "stringprep", "unicodedata"]
