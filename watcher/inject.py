"""Notices injected on the node itself (``sco-agentctl simulate``): files in ``runtime_dir/inject``.

Each file is one relay payload (DESIGN section 3), validated exactly like a
payload from the relay, and deleted once read, whatever it held. The
directory lives under the 0700 runtime directory, so only root can inject;
symlinks and anything but regular files are refused rather than followed.
"""
from __future__ import annotations

import os
import stat

from common.notice import Notice, Rejected, parse_relay_payload

INJECT_DIR = "inject"
SUFFIX = ".json"
MAX_FILES_PER_TICK = 16   # a flood of files is worked off over several ticks


def inject_dir(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, INJECT_DIR)


def read_injected(directory: str, limit: int) -> list[tuple[str, Notice | Rejected]]:
    """Read, validate and delete waiting files, oldest name first: [(file name, notice or rejection)]."""
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(SUFFIX))
    except FileNotFoundError:
        return []
    out: list[tuple[str, Notice | Rejected]] = []
    for name in names[:MAX_FILES_PER_TICK]:
        path = os.path.join(directory, name)
        try:
            out.append((name, parse_relay_payload(_read_regular(path, limit), limit)))
        except Rejected as e:
            out.append((name, e))
        except OSError as e:
            out.append((name, Rejected("unreadable", f"{type(e).__name__}: {e.strerror or e}")))
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
    return out


def _read_regular(path: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Rejected("not_a_file", "not a regular file")
        # One byte over the limit is enough for parse_relay_payload to refuse it as too large.
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)
