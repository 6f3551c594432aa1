"""The Prometheus textfile as the real verifier writes it, after a drain done, an overrun and rejections.

Nothing here writes exposition text: a real ``python -m verifier`` (tests/verifier/rig.py) is fed
notices, drain progress and the watcher's rejection counters over real ipc sockets, and the file
it renders (verifier/__main__.py ``write_metrics``) is what the referees then read.
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path

from common.pod_fate import PodFate
from tests.emulators.kube_fixture import kube_emulator
from tests.support.drain_records import budget, record_dict
from tests.support.notices import notice_dict
from tests.support.promtext import Family, parse, value
from tests.support.wait import wait_for
from tests.verifier.rig import Peers, VerifierProcess


def _has_everything(fams: dict[str, Family]) -> bool:
    return (value(fams, "sco_agent_verdicts_total", outcome="done", held_up_by="none") == 1
            and value(fams, "sco_agent_verdicts_total", outcome="overrun", held_up_by="checkpoint") == 1
            and value(fams, "sco_agent_rejections_total", what="notice", reason="bad_json") == 2
            and value(fams, "sco_agent_rejections_total", what="contract", reason="bad_signature") == 1
            and value(fams, "sco_agent_notice_to_empty_seconds_count") == 1
            and value(fams, "sco_agent_notices_active") == 2
            and value(fams, "sco_agent_verdict_pods_total", outcome="skipped", held="none") == 1
            and value(fams, "sco_agent_verdict_pods_total", outcome="evicted", held="extended") == 1)


def produce(base: str) -> str:
    """Run the verifier in ``base`` until its textfile shows a done, an overrun and 3 rejections."""
    run_dir = os.path.join(base, "run")
    prom = os.path.join(base, "sco_agent.prom")
    peers = Peers(run_dir)
    # The verifier reads node-a itself before it calls a drain done: an empty node, on the emulator.
    exits = ExitStack()
    kube = exits.enter_context(kube_emulator(Path(base) / "kube"))
    kube.add_node("node-a")
    v = VerifierProcess(base, run_dir, metrics={"textfile": prom}, node={"scheduler": "kubernetes"},
                        kubernetes={"api_url": kube.url, "token_file": ""})
    try:
        now = time.time()
        # Rejections as the watcher reports them (its per-start counters, common/runtime.py Rejections).
        peers.counters = {"rejected.bad_json": 2, "contract.rejected.bad_signature": 1, "new.relay": 2}
        done, over = (notice_dict("n-done", deadline=now + 60, now=now - 1),
                      notice_dict("n-over", deadline=now + 5, now=now - 1, channel="metadata"))
        # The drains' records, on the contract's budget (the rig's: a 2 s margin).
        started_on = budget(checkpoint_s=1, evict_s=1, margin_s=2, budget_s=30)
        # n-done: cordoned, told and empty within a second of the notice.
        peers.progress["n-done"] = record_dict(budget=started_on, received_at=done["received_at"], state="done",
                                               remaining=[], steps={"cordoned": now + 0.2, "clients_told": now + 0.3,
                                                                    "node_empty": now + 0.5},
                                               # The pods it touched (the verdict lists them): one left in
                                               # place by its own policy, one evicted after an extension.
                                               pods={"ns/keep": PodFate("skipped", now + 0.3),
                                                     "ns/job": PodFate("evicted", now + 0.4, "extended")})
        # n-over: cordoned and told, but no client acks and a pod never leaves: overrun at the cutoff
        # (deadline - margin 2 s), held up by the checkpoint step.
        peers.progress["n-over"] = record_dict(budget=started_on, received_at=over["received_at"],
                                               remaining=["ns/stuck"],
                                               steps={"cordoned": now + 0.2, "clients_told": now + 0.3})
        peers.active = [done, over]
        v.start()

        def ready() -> str:
            with open(prom) as f:
                text = f.read()
            return text if _has_everything(parse(text)) else ""
        return wait_for(ready, 20, "the textfile to show a done, an overrun and the rejections")
    finally:
        v.stop()
        exits.close()
        peers.close()
