"""A kubeconfig that points kubectl (or the agent) at an emulator over plain HTTP."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from common.fsutil import write_atomic


def kubeconfig_dict(server_url: str, token: str = "emulator-token", namespace: str = "default") -> dict[str, Any]:
    """One cluster, one token user, one current context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server_url}}],
        "users": [{"name": "emulator", "user": {"token": token}}],
        "contexts": [{"name": "emulator",
                      "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}],
        "current-context": "emulator",
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], server_url: str, token: str = "emulator-token",
                     namespace: str = "default") -> Path:
    """Write the kubeconfig (JSON is valid YAML) and return its path."""
    target = Path(path)
    write_atomic(str(target), json.dumps(kubeconfig_dict(server_url, token, namespace), indent=2).encode())
    return target
