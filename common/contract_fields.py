"""The contract's field checks (common.contract): each returns the value it accepts, or raises a
ValueError naming the field, what it expected and what it got -- the message an operator reads when
`sco-agentctl contract sign` or an agent refuses a bundle."""
from __future__ import annotations

import re
from typing import Any

from common.timefmt import parse_rfc3339

# Signals a workload may be asked to checkpoint with. SIGKILL/SIGSTOP cannot be
# caught, so they could never mean "checkpoint"; anything exotic is a typo.
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGWINCH")

NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
# A Kubernetes qualified name: optional DNS-subdomain prefix, '/', a name of at most 63 characters.
TAINT_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
URL = re.compile(r"^https?://[^\s/?#@]+(/[^\s]*)?$")


def fail(name: str, expected: str, got: Any) -> ValueError:
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ValueError(f"contract field '{name}': expected {expected}, got {shown}")


def json_object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(name, "a JSON object", type(value).__name__)
    return value


def required(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        path = key if where == "contract" else f"{where}.{key}"
        raise ValueError(f"contract field '{path}': missing")
    return obj[key]


def no_unknown(obj: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        prefix = "contract" if where == "contract" else f"contract field '{where}'"
        raise ValueError(f"{prefix}: unknown key(s) {unknown[:5]}")


def integer(value: Any, name: str, lo: int, hi: int) -> int:
    # bool is an int subclass in Python; true must not read as 1 second.
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise fail(name, f"an integer from {lo} to {hi}", value)
    return value


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise fail(name, "true or false", value)
    return value


def choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise fail(name, f"one of {', '.join(choices)}", value)
    return value


def name_or_star(value: Any, name: str) -> str:
    if isinstance(value, str) and (value == "*" or NAME.match(value)):
        return value
    raise fail(name, "a name of letters, digits, '.', '_', '-' (at most 63) or '*'", value)


def rfc3339_time(value: Any, name: str) -> float:
    try:
        return parse_rfc3339(value)
    except (ValueError, OverflowError):
        raise fail(name, "an RFC 3339 time", value) from None


def taint_key(value: Any) -> str:
    if isinstance(value, str) and len(value) <= 317 and TAINT_KEY.match(value):
        return value
    raise fail("taint_key", "a Kubernetes qualified name like 'sco.io/notice'", value)


def signal_name(value: Any, name: str) -> str:
    # Accept Slurm's spelling ('USR1') as well as the C name; store the C name.
    if isinstance(value, str):
        canonical = value if value.startswith("SIG") else "SIG" + value
        if canonical in SIGNALS:
            return canonical
    raise fail(name, f"one of {', '.join(SIGNALS)}", value)


def url_or_null(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 2048 and URL.match(value):
        return value
    raise fail(name, "null or an http(s) URL", value)
