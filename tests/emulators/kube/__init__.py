"""A Kubernetes API-server emulator faithful enough for kubectl drain and the sco-agent.

Stdlib only, plain HTTP on 127.0.0.1, served by the shared emulator shell
(``tests.emulators._server``: listeners, faults, down/up, request log, ``/_emu/``). Start it
in-process with ``KubeApiServer`` or as a process with ``python -m
tests.emulators.kube_apiserver``; drive tests through ``tests.emulators.kube_fixture``.
Module map: ``app`` (the shell's app: auth, Status errors, watch streams, control commands),
``api`` (REST), ``store`` (objects, RV, watch log), ``patching``, ``selectors``, ``policy``
(PDB + eviction), ``controllers`` (kubelet, disruption controller, ReplicaSets, scheduler),
``table``, ``openapi``, ``protobuf``, ``client`` (``KubeControl``), ``server`` (``KubeApiServer``).
"""
from __future__ import annotations

from .client import KubeControl
from .kubeconfig import kubeconfig_dict, write_kubeconfig
from .options import Options
from .server import KubeApiServer

__all__ = ["KubeApiServer", "KubeControl", "Options", "kubeconfig_dict", "write_kubeconfig"]
