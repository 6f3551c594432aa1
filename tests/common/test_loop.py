"""The one loop shape (common/loop.py) and the StopFlag every process stops by."""
from __future__ import annotations

import os
import signal

import zmq

from common.loop import Loop
from common.runtime import StopFlag


def pair(ctx: zmq.Context, name: str) -> tuple[zmq.Socket, zmq.Socket]:
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(f"inproc://{name}")
    b.connect(f"inproc://{name}")
    return a, b


def test_handlers_run_for_what_is_readable_in_registration_order_and_turn_sees_the_rest():
    ctx = zmq.Context()
    r, w = os.pipe()
    try:
        (a_in, a_out), (b_in, b_out), (c_in, _c_out) = pair(ctx, "a"), pair(ctx, "b"), pair(ctx, "c")
        ran: list[str] = []
        loop = Loop()
        loop.on(b_in, lambda: ran.append(b_in.recv().decode()))
        loop.on(a_in, lambda: ran.append(a_in.recv().decode()))
        loop.on(c_in, lambda: ran.append("c"))       # never readable: never run
        loop.on(r)                                   # no handler: only wakes the loop
        a_out.send(b"a")
        b_out.send(b"b")
        os.write(w, b"x")
        ready: set = set()
        for _ in range(50):                          # inproc delivery is asynchronous
            ready |= loop.once(100)
            if len(ran) == 2 and r in ready:
                break
        assert sorted(ran) == ["a", "b"] and r in ready and c_in not in ready
        assert loop.once(0) == {r}                   # the fd stays readable: no handler drained it
    finally:
        os.close(r)
        os.close(w)
        ctx.destroy(linger=0)


def test_run_turns_until_asked_to_stop_with_the_timeout_it_is_given():
    loop = Loop()
    r, w = os.pipe()
    try:
        loop.on(r)
        flag = StopFlag()
        try:
            turns: list[set] = []
            asked: list[int] = []

            def timeout() -> int:
                asked.append(len(turns))
                return 0

            loop.run(flag, turns.append, timeout, until=lambda: len(turns) == 3)
            assert turns == [set(), set(), set()] and asked == [0, 1, 2]
        finally:
            flag.close()
    finally:
        os.close(r)
        os.close(w)


def test_sigterm_sets_the_flag_calls_on_stop_and_close_puts_the_handler_back():
    before = signal.getsignal(signal.SIGTERM)
    woken: list[bool] = []
    flag = StopFlag(on_stop=lambda: woken.append(True))
    try:
        signal.raise_signal(signal.SIGTERM)        # delivered to this (the main) thread, at once
        assert flag.stopping and woken == [True]
    finally:
        flag.close()
    assert signal.getsignal(signal.SIGTERM) is before
