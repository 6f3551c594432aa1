"""Which boot this is, as the kernel names it: a notice persisted in an earlier boot whose deadline
has passed announced an event that has happened (watcher/__main__.py ``retire_past``)."""
from __future__ import annotations

# Where the kernel names this boot: a notice persisted in an earlier boot whose deadline has passed
# announced an event that has happened (the machine was stopped or rebooted), so it is retired.
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id, or "" where the kernel does not say (then no boot is told from another)."""
    try:
        with open(path) as f:
            return f.read(64).strip()
    except OSError:
        return ""
