"""The tally of a chaos run and its printed table (one JSON line at the end)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import ujson


@dataclass
class Tally:
    scheduler: str
    seed: int
    drains: int = 0
    faults: Counter[str] = field(default_factory=Counter)     # applied, by kind
    skipped: Counter[str] = field(default_factory=Counter)    # planned but could not land (program not running)
    verdicts: Counter[str] = field(default_factory=Counter)   # done | overrun | none | several
    overrun_allowed: int = 0
    violations: list[str] = field(default_factory=list)
    events_spooled: int = 0
    events_lost: int = 0
    shipped_duplicates: int = 0                                # at-least-once: resends Vector received twice
    # Counted from emission (every event.emitted id in the programs' logs): delivered, set aside, dropped, lost.
    events_emitted: int = 0
    emitted_delivered: int = 0
    emitted_poisoned: int = 0
    emitted_dropped: int = 0
    emitted_lost: int = 0                                      # missing beyond spool.dropped: lost without a word
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "seed": self.seed, "drains": self.drains,
                "faults": dict(sorted(self.faults.items())), "faults_total": sum(self.faults.values()),
                "skipped": dict(sorted(self.skipped.items())), "verdicts": dict(sorted(self.verdicts.items())),
                "overrun_allowed": self.overrun_allowed, "events_spooled": self.events_spooled,
                "events_lost": self.events_lost, "shipped_duplicates": self.shipped_duplicates,
                "from_emission": {"emitted": self.events_emitted, "in_vector": self.emitted_delivered,
                                  "poison": self.emitted_poisoned, "dropped": self.emitted_dropped,
                                  "lost": self.emitted_lost},
                "violations": len(self.violations), "violation_list": self.violations[:50],
                "seconds": round(self.seconds, 1)}


def table(tallies: list[Tally]) -> str:
    """A plain-text table, one column per run."""
    rows: list[tuple[str, list[str]]] = [
        ("drains run", [str(t.drains) for t in tallies]),
        ("seed", [str(t.seed) for t in tallies]),
    ]
    kinds = sorted({k for t in tallies for k in t.faults} | {k for t in tallies for k in t.skipped})
    for k in kinds:
        rows.append((f"  fault {k}", [f"{t.faults[k]}" + (f" (+{t.skipped[k]} skipped)" if t.skipped[k] else "")
                                      for t in tallies]))
    rows.append(("faults injected", [str(sum(t.faults.values())) for t in tallies]))
    for v in sorted({k for t in tallies for k in t.verdicts}):
        rows.append((f"verdict {v}", [str(t.verdicts[v]) for t in tallies]))
    rows += [
        ("overrun legitimate (plan)", [str(t.overrun_allowed) for t in tallies]),
        ("events emitted", [str(t.events_emitted) for t in tallies]),
        ("  in Vector", [str(t.emitted_delivered) for t in tallies]),
        ("  set aside (spool.poison)", [str(t.emitted_poisoned) for t in tallies]),
        ("  dropped (spool.dropped)", [str(t.emitted_dropped) for t in tallies]),
        ("  lost from emission", [str(t.emitted_lost) for t in tallies]),
        ("events spooled", [str(t.events_spooled) for t in tallies]),
        ("events lost", [str(t.events_lost) for t in tallies]),
        ("duplicates shipped", [str(t.shipped_duplicates) for t in tallies]),
        ("invariant violations", [str(len(t.violations)) for t in tallies]),
        ("wall time", [f"{t.seconds:.0f} s" for t in tallies]),
    ]
    width = max(len(name) for name, _ in rows)
    cols = [max(len(t.scheduler), *(len(r[1][i]) for r in rows)) for i, t in enumerate(tallies)]
    head = " " * width + "  " + "  ".join(t.scheduler.rjust(w) for t, w in zip(tallies, cols, strict=True))
    lines = [head]
    for name, cells in rows:
        lines.append(name.ljust(width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, cols, strict=True)))
    return "\n".join(lines)


def json_line(tallies: list[Tally]) -> str:
    """The headline first: counted from emission, over every run."""
    return ujson.dumps({"events_emitted": sum(t.events_emitted for t in tallies),
                        "emitted_lost": sum(t.emitted_lost for t in tallies),
                        "spool_dropped": sum(t.emitted_dropped for t in tallies),
                        "spool_poison": sum(t.emitted_poisoned for t in tallies),
                        "chaos": [t.to_json() for t in tallies]})
