"""The emulator's volumes (tests/emulators/kube/controllers.py ``_volumes``): a pod's claims are
attached to its node and in use while it is there; once it is gone they leave volumesInUse at
once and volumesAttached after ``detach_delay``; a pod marked ``volume-detach: never`` leaves its
volume attached for good; another node's volumes are its own."""
from __future__ import annotations

from tests.emulators.kube import objects as o
from tests.emulators.kube.controllers import CSI_PREFIX, Controllers
from tests.emulators.kube.options import Options
from tests.emulators.kube.resources import NODES, PODS
from tests.emulators.kube.store import Store


class Cluster:
    def __init__(self, detach_delay: float) -> None:
        self.now = 1_800_000_000.0
        self.store = Store(lambda: self.now)
        self.options = Options(detach_delay=detach_delay, grace_cap=0.0)
        self.controllers = Controllers(self.store, lambda: self.options, lambda: self.now)
        for n in ("n1", "n2"):
            self.store.create(NODES, "", o.node(n))

    def step(self, seconds: float = 0.0) -> None:
        self.now += seconds
        self.controllers.run_once()

    def volumes(self, node: str = "n1") -> tuple[list[str], list[str]]:
        status = self.store.find(NODES, "", node)["status"]
        return [v["name"] for v in status.get("volumesAttached") or []], list(status.get("volumesInUse") or [])

    def delete(self, name: str) -> None:
        pod = self.store.find(PODS, "default", name)
        self.store.remove(PODS, "default", name, pod["metadata"]["uid"])


def test_a_claim_is_attached_in_use_then_detached_after_the_delay() -> None:
    c = Cluster(detach_delay=5.0)
    c.store.create(PODS, "default", o.pod("db-0", "n1", claims=("data-db-0",)))
    c.store.create(PODS, "default", o.pod("web", "n2", claims=("data-web",)))
    c.step()
    vol = f"{CSI_PREFIX}default.data-db-0"
    assert c.volumes() == ([vol], [vol])
    c.delete("db-0")
    c.step()
    assert c.volumes() == ([vol], [])          # unmounted with the pod, not detached yet
    c.step(4.9)
    assert c.volumes() == ([vol], [])
    c.step(0.2)
    assert c.volumes() == ([], [])             # the provider's detach is done
    assert c.volumes("n2")[0] == [f"{CSI_PREFIX}default.data-web"]


def test_a_volume_marked_never_stays_attached_after_its_pod() -> None:
    c = Cluster(detach_delay=0.0)
    c.store.create(PODS, "default", o.pod("db-0", "n1", claims=("data-db-0",), volume_detach="never"))
    c.step()
    c.delete("db-0")
    c.step(600.0)
    assert c.volumes() == ([f"{CSI_PREFIX}default.data-db-0"], [])
