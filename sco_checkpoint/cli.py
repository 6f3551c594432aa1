"""sco-checkpoint: the agent socket for shell scripts and programs that cannot link the client.

    sco-checkpoint wait [--timeout S]            block until a notice; print it as one JSON line
    sco-checkpoint ack ID [--failed] [--detail]  answer a notice from a script
    sco-checkpoint run [--signal USR1] [--window S] [--extend S] -- CMD...

``run`` starts CMD in its own process group and, on a notice, sends the signal
to that group, then waits up to the checkpoint window: min(--window,
checkpoint_by - now). It acks ``checkpointed`` as soon as CMD creates the
file named by $SCO_CHECKPOINT_DONE, or if CMD exits with status 0 inside the
window; otherwise (non-zero exit, death by signal, window over) ``failed``.
It never kills CMD itself -- moving the work off is the agent's job -- and
exits with CMD's status (128+N if CMD died of signal N). Termination signals
sent to the wrapper (SIGTERM from a scheduler, SIGINT, SIGHUP) are passed on
to CMD's group, since CMD no longer shares the wrapper's group. The notice
itself is written to $SCO_CHECKPOINT_NOTICE before the signal is sent. With
``--extend S`` it first asks the agent for S more seconds (``extend``): the
notice written and the window then use the checkpoint_by the agent granted,
which may be less than asked; a refusal is said on stderr and changes nothing.

Exit codes: 0 success; 1 the agent refused (ack); 2 timeout (wait); 64 usage; 127 CMD not found.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import NoReturn

from sco_checkpoint.client import (
    Message,
    ProtocolError,
    ack_notice,
    extend,
    on_notice,
    wait_for_notice,
)

EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 64, 127
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_DONE_POLL_S = 0.05  # how often the done-file is looked for, only inside a checkpoint window
_ACK_GRACE_S = 10.0  # after CMD exits, how long an answer in progress may take to reach the agent


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2, which means "timeout" here
        raise _UsageError(f"{self.prog}: {message}")


def parse_time(text: object) -> float:
    """Epoch seconds of an RFC 3339 time with its offset ('...T12:00:00.000Z'); ValueError otherwise.

    Not common.timefmt's strict parser: this package is standard library only. It reads
    only times the agent wrote, and a time it cannot read just leaves --window alone.
    """
    if not isinstance(text, str) or len(text) > 40:
        raise ValueError("not an RFC 3339 time")
    # 'Z' spelled as an offset: fromisoformat() reads it only from Python 3.11 on.
    when = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    if when.tzinfo is None:
        raise ValueError(f"no UTC offset: {text!r}")
    return when.timestamp()


def checkpoint_window(notice: Message, window_s: float, now_epoch: float) -> float:
    """Seconds to wait for the checkpoint: the smaller of --window and what is left before checkpoint_by."""
    try:
        left = parse_time(notice.get("checkpoint_by")) - now_epoch
    except ValueError:
        return window_s  # no usable checkpoint_by: the operator's window alone
    return max(0.0, min(window_s, left))


def wait_checkpoint(done_path: str, exited: threading.Event, returncode: Callable[[], int | None],
                    window_s: float) -> bool:
    """True when CMD touched the done file, or exited 0, within ``window_s``."""
    deadline = time.monotonic() + window_s
    while True:
        if os.path.exists(done_path):
            return True
        if exited.is_set():
            return returncode() == 0
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        exited.wait(min(_DONE_POLL_S, left))


def _cmd_wait(args: argparse.Namespace) -> int:
    notice = wait_for_notice(args.timeout, path=args.socket, name=args.name or "sco-checkpoint wait")
    if notice is None:
        print("sco-checkpoint: no notice before the timeout", file=sys.stderr)
        return EXIT_TIMEOUT
    print(json.dumps(notice, separators=(",", ":")), flush=True)
    return 0


def _cmd_ack(args: argparse.Namespace) -> int:
    status = "failed" if args.failed else "checkpointed"
    try:
        reply = ack_notice(args.id, status, args.detail or "", path=args.socket,
                           name=args.name or "sco-checkpoint ack")
    except (OSError, ProtocolError) as e:
        print(f"sco-checkpoint: ack not accepted: {e}", file=sys.stderr)
        return EXIT_REFUSED
    print(json.dumps(reply, separators=(",", ":")), flush=True)
    return 0


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # CMD and its group are gone already


def _cmd_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise _UsageError("sco-checkpoint run: no command given after --")
    tmpdir = tempfile.mkdtemp(prefix="sco-checkpoint-")
    done_path = os.path.join(tmpdir, "done")
    notice_path = os.path.join(tmpdir, "notice.json")
    env = dict(os.environ, SCO_CHECKPOINT_DONE=done_path, SCO_CHECKPOINT_NOTICE=notice_path)
    try:
        try:
            proc = subprocess.Popen(cmd, env=env, process_group=0)
        except (FileNotFoundError, PermissionError) as e:
            print(f"sco-checkpoint: cannot run {cmd[0]}: {e}", file=sys.stderr)
            return EXIT_NOT_FOUND
        exited = threading.Event()

        def checkpoint(notice: Message) -> bool:
            if os.path.exists(done_path):
                os.unlink(done_path)  # left from an earlier notice: this one needs its own
            if args.extend:
                try:
                    extend(args.extend)   # writes the granted checkpoint_by into the notice
                except (OSError, ProtocolError) as e:
                    print(f"sco-checkpoint: no extension: {e}", file=sys.stderr, flush=True)
            with open(notice_path + ".tmp", "w") as f:
                json.dump(notice, f)
            os.replace(notice_path + ".tmp", notice_path)
            _signal_group(proc.pid, args.signal)
            window = checkpoint_window(notice, args.window, time.time())
            return wait_checkpoint(done_path, exited, lambda: proc.returncode, window)

        previous = {s: signal.signal(s, lambda signum, _frame: _signal_group(proc.pid, signum))
                    for s in _FORWARDED}
        listener = on_notice(checkpoint, path=args.socket,
                             name=args.name or f"sco-checkpoint run {os.path.basename(cmd[0])}")
        try:
            rc = proc.wait()
        finally:
            exited.set()
            listener.stop(timeout=_ACK_GRACE_S)
            for s, handler in previous.items():
                signal.signal(s, handler)
        return 128 - rc if rc < 0 else rc
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _parse_signal(text: str) -> int:
    name = text.upper()
    if name.isascii() and name.isdigit():
        return int(name)
    try:
        return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number of seconds: {text!r}")
    return value


def _parser() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--socket", help="agent socket path (default $SCO_AGENT_SOCKET or "
                                         "/run/sco-agent-socket/agent.sock)")
    common.add_argument("--name", help="client name the agent records")
    parser = _Parser(prog="sco-checkpoint", description="Talk to the sco-agent checkpoint socket.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    wait = sub.add_parser("wait", parents=[common], help="block until a notice; print it as JSON")
    wait.add_argument("--timeout", type=float, default=None, help="give up after S seconds (exit 2)")
    wait.set_defaults(func=_cmd_wait)
    ack = sub.add_parser("ack", parents=[common], help="acknowledge the active notice")
    ack.add_argument("id", help="the notice id")
    ack.add_argument("--failed", action="store_true", help="report a failed checkpoint")
    ack.add_argument("--detail", help="free text recorded with the ack")
    ack.set_defaults(func=_cmd_ack)
    run = sub.add_parser("run", parents=[common], help="run CMD; signal it on a notice and ack")
    run.add_argument("--signal", type=_parse_signal, default=signal.SIGUSR1,
                     help="signal sent to CMD's process group on a notice (default USR1)")
    run.add_argument("--window", type=float, default=60.0,
                     help="most seconds to wait for the checkpoint (default 60; checkpoint_by caps it)")
    run.add_argument("--extend", type=_positive_int, default=0, metavar="S",
                     help="on a notice, first ask the agent for S more seconds before checkpoint_by")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    run.set_defaults(func=_cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the sco-checkpoint console script; returns the exit status."""
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
        status: int = args.func(args)
        return status
    except _UsageError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
