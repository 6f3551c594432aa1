"""RFC 3339 timestamps: the one parser and formatter every process uses.

Times travel as RFC 3339 strings on the wire and as float seconds since the
epoch (UTC) inside the cores, so comparisons never depend on a timezone.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime, timezone

# Full RFC 3339 date-time: a 'T' (or space/lowercase t), seconds required, an
# optional fraction, and a mandatory offset ('Z' or +hh:mm). Anything looser is
# rejected rather than guessed at.
# Times the agent can both hold and write back: from the epoch to the end of year
# 9999 UTC. A time outside (year 0001 with a +23:59 offset, 9999-12-31 with
# -23:59) parses but cannot be formatted again, and a notice carrying one would
# fail every process that re-announces it; it is refused at the edge instead.
MIN_EPOCH = 0.0
MAX_EPOCH = 253402300800.0   # 10000-01-01T00:00:00Z

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?"
    r"([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339(text: str) -> float:
    """Return epoch seconds for an RFC 3339 string; ``ValueError`` on anything else."""
    if not isinstance(text, str) or len(text) > 40:
        raise ValueError("not an RFC 3339 time")
    m = _RFC3339.match(text)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text[:40]!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = float(m.group(7)) if m.group(7) else 0.0
    offset = m.group(8)
    if offset in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if offset[0] == "+" else -1
        hh, mm = int(offset[1:3]), int(offset[4:6])
        if hh > 23 or mm > 59:
            raise ValueError(f"bad UTC offset: {offset!r}")
        from datetime import timedelta

        tz = timezone(sign * timedelta(hours=hh, minutes=mm))
    # Leap second 60 is legal RFC 3339; clamp it to 59 (one second early is the safe side).
    second = min(second, 59)
    dt = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    return _in_range(dt.timestamp() + frac, text)


def _in_range(epoch: float, text: str) -> float:
    if not MIN_EPOCH <= epoch < MAX_EPOCH:
        raise ValueError(f"time outside 1970..9999 UTC: {text[:40]!r}")
    return epoch


def format_rfc3339(epoch: float, millis: bool = True) -> str:
    """UTC RFC 3339 with a 'Z' suffix; milliseconds unless asked not to."""
    dt = datetime.fromtimestamp(epoch, tz=UTC)
    if millis:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


# The GMT layouts instance-metadata services use: RFC 1123 (Azure Scheduled
# Events: "Mon, 19 Sep 2016 18:29:47 GMT") and Go's "2 Jan 2006 15:04:05 GMT"
# (AWS maintenance events). Both are "[weekday, ]day month year hh:mm:ss GMT".
_GMT = re.compile(r"^(?:(Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?(\d{1,2}) "
                  r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) "
                  r"(\d{2}):(\d{2}):(\d{2}) (?:GMT|UTC)$")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def parse_gmt(text: str) -> float:
    """Epoch seconds for an RFC 1123 or Go-layout GMT time; ``ValueError`` on anything else."""
    if not isinstance(text, str) or len(text) > 40:
        raise ValueError("not a GMT time")
    m = _GMT.match(text)
    if not m:
        raise ValueError(f"not a GMT time: {text[:40]!r}")
    day, month, year = int(m.group(2)), _MONTHS.index(m.group(3)) + 1, int(m.group(4))
    hour, minute, second = int(m.group(5)), int(m.group(6)), min(int(m.group(7)), 59)
    # datetime() refuses 31 Feb and hour 25: the error names the text.
    try:
        epoch = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    except ValueError as e:
        raise ValueError(f"not a GMT time: {text[:40]!r}: {e}") from None
    return _in_range(epoch, text)
