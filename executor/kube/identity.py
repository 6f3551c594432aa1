"""Who the drain's connections are (pure): the node identity, and the taint identity where one is
configured (NodeRestriction refuses a node identity's own taint changes: docs/kubernetes.md)."""
from __future__ import annotations

from typing import NamedTuple

from common.http import TlsFiles


class Identity(NamedTuple):
    """Who a connection is: a bearer ``token``, or the client certificate in ``tls`` -- never both."""

    token: str
    tls: TlsFiles


def identities(token: str, taint_token: str, tls: TlsFiles) -> tuple[Identity, Identity | None]:
    """The node identity and the taint identity (None: taints go as the node), from the configured
    credentials (pure). A client certificate, when configured, is the node identity and the node's
    bearer token is not sent with it; the taint token goes over TLS with the CA but no certificate."""
    node = Identity("" if tls.cert_file else token, tls)
    taint = Identity(taint_token, TlsFiles(ca_file=tls.ca_file)) if taint_token else None
    return node, taint
