"""Which pods on the node still count for the drain: ``common.pod_filters``, where the verifier's
own read of the node uses the same filters (it may not import executor/)."""
from __future__ import annotations

from common.pod_filters import FILTERS, MIRROR_ANNOTATION, PodVerdict, pod_key, pod_verdict, pods_that_count

__all__ = ["FILTERS", "MIRROR_ANNOTATION", "PodVerdict", "pod_key", "pod_verdict", "pods_that_count"]
