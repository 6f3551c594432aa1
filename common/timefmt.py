"""RFC 3339 timestamps: the one parser and formatter every process uses.

Times travel as RFC 3339 strings on the wire and as float seconds since the
epoch (UTC) inside the cores, so comparisons never depend on a timezone.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

# The instants that can be written as RFC 3339 and read back: years 0001..9999 in
# UTC. A text outside (year 0001 with a +23:59 offset, 9999-12-31 with -23:59)
# matches the pattern but cannot be formatted again, so it is refused here.
MIN_EPOCH = -62135596800.0   # 0001-01-01T00:00:00Z
MAX_EPOCH = 253402300800.0   # 10000-01-01T00:00:00Z

# Full RFC 3339 date-time: a 'T' (or space/lowercase t), seconds required, an
# optional fraction, and a mandatory offset ('Z' or +hh:mm). Anything looser is
# rejected rather than guessed at.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?"
    r"([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339(text: object) -> float:
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
        tz = timezone(sign * timedelta(hours=hh, minutes=mm))
    # Leap second 60 is legal RFC 3339; clamp it to 59 (one second early is the safe side).
    second = min(second, 59)
    dt = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    return _in_range(dt.timestamp() + frac, text)


def _in_range(epoch: float, text: str) -> float:
    if not MIN_EPOCH <= epoch < MAX_EPOCH:
        raise ValueError(f"time outside 0001..9999 UTC: {text[:40]!r}")
    return epoch


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def format_rfc3339(epoch: float, millis: bool = True) -> str:
    """UTC RFC 3339 with a 'Z' suffix; milliseconds unless asked not to."""
    # Not fromtimestamp(): it refuses instants before 1970 on some platforms. Not strftime("%Y"):
    # it does not pad years below 1000 to the four digits RFC 3339 requires.
    dt = _EPOCH + timedelta(seconds=epoch)
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    return f"{text}.{dt.microsecond // 1000:03d}Z" if millis else f"{text}Z"


# The GMT layouts instance-metadata services use: RFC 1123 (Azure Scheduled
# Events: "Mon, 19 Sep 2016 18:29:47 GMT") and Go's "2 Jan 2006 15:04:05 GMT"
# (AWS maintenance events). Both are "[weekday, ]day month year hh:mm:ss GMT".
_GMT = re.compile(r"^(?:(Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?(\d{1,2}) "
                  r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) "
                  r"(\d{2}):(\d{2}):(\d{2}) (?:GMT|UTC)$")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def parse_gmt(text: object) -> float:
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
