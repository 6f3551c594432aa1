"""A hall's relay as deploy/nats/ describes it, on a real nats-server: operator, accounts, scoped users.

The control plane's side, done the way nsc would (tests/support/authkit.py mints the nkeys and
JWTs with ``cryptography``): the operator signs the system account and the SCO account, whose
claims are deploy/nats/account-sco.json with its two placeholder keys replaced by fresh scoped
signing keys; each user JWT is signed by the key of its role and carries only its name and its
hall tag. The server runs deploy/nats/nats-server.conf with its two paths moved into a temp dir.
"""
from __future__ import annotations

import json
import os

from tests.support.agent_rig import REPO
from tests.support.authkit import NKey, creds_text, jwt
from tests.support.nats_rig import NatsServer

NATS_DIR = os.path.join(REPO, "deploy", "nats")
CONF_PATHS = ("/etc/nats/sco-operator.jwt", "/var/lib/nats/jwt")


def account_claims() -> dict:
    with open(os.path.join(NATS_DIR, "account-sco.json"), encoding="utf-8") as f:
        return json.load(f)


class Hall:
    """Keys, the server's files and a running server; ``creds(role, name, hall)`` mints a user."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.operator, self.system, self.account = NKey.new("operator"), NKey.new("account"), NKey.new("account")
        self.signing = {"node": NKey.new("account"), "relay": NKey.new("account")}
        doc = account_claims()
        text = json.dumps(doc["nats"])
        for role, key in self.signing.items():
            text = text.replace(f"{role.upper()}_SIGNING_KEY", key.public)
        claims = json.loads(text)
        jwt_dir = os.path.join(directory, "jwt")
        os.makedirs(jwt_dir)
        accounts = [(self.system, "SYS", {"limits": {"subs": -1, "conn": -1, "data": -1, "payload": -1}}),
                    (self.account, doc["name"], claims)]
        for key, name, nats in accounts:
            with open(os.path.join(jwt_dir, f"{key.public}.jwt"), "w") as f:
                f.write(jwt(self.operator, key, name, nats))
        operator_jwt = os.path.join(directory, "operator.jwt")
        with open(operator_jwt, "w") as f:
            f.write(jwt(self.operator, self.operator, "sco", {"system_account": self.system.public}))
        with open(os.path.join(NATS_DIR, "nats-server.conf"), encoding="utf-8") as f:
            conf = f.read()
        for shipped, here in zip(CONF_PATHS, (operator_jwt, jwt_dir), strict=True):
            assert shipped in conf, f"deploy/nats/nats-server.conf no longer names {shipped}"
            conf = conf.replace(shipped, here)
        self.conf = os.path.join(directory, "nats-server.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.server = NatsServer(os.path.join(directory, "nats.log"), args=["-c", self.conf])

    def creds(self, role: str, name: str, hall: str) -> str:
        """A .creds file for a user of ``role`` (node: name is the node name with '.' as '_')."""
        user = NKey.new("user")
        token = jwt(self.signing[role], user, name, {"issuer_account": self.account.public, "tags": [f"hall:{hall}"]})
        path = os.path.join(self.dir, f"{role}-{name}.creds")
        with open(path, "w") as f:
            f.write(creds_text(token, user.seed))
        os.chmod(path, 0o600)
        return path

    def log(self) -> str:
        with open(os.path.join(self.dir, "nats.log"), errors="replace") as f:
            return f.read()
