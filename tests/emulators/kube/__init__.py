"""A Kubernetes API-server emulator faithful enough for kubectl drain and the sco-agent.

Stdlib only, plain HTTP on 127.0.0.1. Start it in-process with ``KubeApiServer`` or as a
process with ``python -m tests.emulators.kube_apiserver``; drive tests through
``tests.emulators.kube_fixture``. Module map: ``api`` (REST), ``store`` (objects, RV, watch
log), ``patching``, ``selectors``, ``policy`` (PDB + eviction), ``controllers`` (kubelet,
disruption controller, ReplicaSets, scheduler), ``faults``, ``control`` (/_emu/), ``table``,
``openapi``, ``protobuf``, ``http_shell`` (listeners, handler), ``server`` (``KubeApiServer``).
"""
from __future__ import annotations

from .kubeconfig import kubeconfig_dict, write_kubeconfig
from .options import Options
from .server import KubeApiServer

__all__ = ["KubeApiServer", "Options", "kubeconfig_dict", "write_kubeconfig"]
