"""The agent's configuration: every setting declared once, with its type, default and reason.

The file is TOML, read with the standard library's ``tomllib``. Each setting
appears exactly once in ``SETTINGS`` below; the documented example file
(``deploy/sco-agent.toml``) is rendered from this table, so a key can't be
added in one place and forgotten in another. Unknown keys and wrong types are
refused at start with a message naming the key: a typo must not silently fall
back to a default on a production node.
"""
from __future__ import annotations

import math
import os
import stat
import tomllib
from typing import Any, NamedTuple

DEFAULT_PATH = "/etc/sco-agent/agent.toml"
ENV_PATH = "SCO_AGENT_CONFIG"
MAX_CONFIG_BYTES = 256 * 1024


# A NamedTuple, not a dataclass: dataclasses imports inspect (with ast, dis, tokenize),
# about 1 MiB in every process that reads the configuration (docs/footprint.md).
class Setting(NamedTuple):
    section: str
    key: str
    type: type
    default: Any
    comment: str


SETTINGS: tuple[Setting, ...] = (
    # [node] -- who this agent is
    Setting("node", "name", str, "", "Node name as the scheduler knows it. Empty: the short host name."),
    Setting("node", "hall", str, "default", "Hall (site/region) this node belongs to; picks relay subjects and contract scope."),
    Setting("node", "node_class", str, "default", "Node class; a contract bundle must name it (or '*') to be accepted."),
    Setting("node", "instance_id", str, "", "Provider instance id. Empty: learned from instance metadata."),
    Setting("node", "scheduler", str, "kubernetes", "kubernetes | slurm | none: what the executor drains through."),
    # [paths]
    Setting("paths", "runtime_dir", str, "/run/sco-agent", "IPC sockets, the contract status, injected notices (created 0700). Nothing a drain needs: a unit stop removes it (systemd RuntimeDirectory=)."),
    Setting("paths", "state_dir", str, "/var/lib/sco-agent", "What outlives a unit restart, a stop and a reboot: notice state, drain progress (evicted pods, acks), verdicts, the spool file, the last-known-good contract. Never mount it into a pod."),
    # [relay] -- the per-hall NATS notice stream
    Setting("relay", "servers", list, ["nats://127.0.0.1:4222"], "NATS server URLs of the hall's notice relay; empty list disables the relay."),
    Setting("relay", "credentials_file", str, "", "NATS .creds file (JWT + nkey) for production relays."),
    Setting("relay", "tls_ca", str, "", "CA bundle to verify the relay's TLS certificate."),
    Setting("relay", "tls_cert", str, "", "Client certificate for mutual TLS."),
    Setting("relay", "tls_key", str, "", "Client key for mutual TLS."),
    Setting("relay", "max_payload", int, 8192, "Largest relay payload accepted, bytes (DESIGN section 3: 8 KiB)."),
    # [metadata] -- the instance metadata poll
    Setting("metadata", "provider", str, "aws", "aws | gcp | azure | sco | none."),
    Setting("metadata", "url", str, "http://169.254.169.254", "Base URL of the metadata service."),
    Setting("metadata", "poll_interval_s", float, 5.0, "Seconds between polls; AWS recommends 5."),
    Setting("metadata", "timeout_s", float, 2.0, "Per-request timeout; a hung service must not stall the poll loop."),
    Setting("metadata", "max_body", int, 65536, "Largest metadata body read, bytes; larger bodies are refused unread."),
    Setting("metadata", "imds_token_ttl_s", int, 21600, "AWS IMDSv2 token lifetime requested (1..21600)."),
    Setting("metadata", "allow_imdsv1", bool, False, "Fall back to IMDSv1 (no token). Off: IMDSv1 is an SSRF risk."),
    # [contract]
    Setting("contract", "launch_path", str, "/etc/sco-agent/contract-launch.json", "Signed contract subset written by cloud-init at launch."),
    Setting("contract", "trust_dir", str, "/etc/sco-agent/trust", "Directory of trusted Ed25519 public keys (*.pub)."),
    Setting("contract", "url", str, "", "URL of the full signed bundle; empty disables refresh."),
    Setting("contract", "refresh_s", float, 60.0, "Seconds between bundle fetches (jittered)."),
    # [kubernetes]
    Setting("kubernetes", "api_url", str, "", "API server URL, e.g. https://10.0.0.1:6443."),
    Setting("kubernetes", "token_file", str, "/var/lib/sco-agent/kube-token", "Bearer token of the agent's node-bound identity."),
    Setting("kubernetes", "client_cert_file", str, "", "Client certificate of the node identity instead of a token, e.g. the kubelet's /var/lib/kubelet/pki/kubelet-client-current.pem (key included); token_file is then not sent."),
    Setting("kubernetes", "client_key_file", str, "", "Its private key, if not in client_cert_file."),
    Setting("kubernetes", "ca_file", str, "", "CA bundle for the API server; empty uses the system store."),
    Setting("kubernetes", "timeout_s", float, 5.0, "Per-request timeout; past it the API server counts as unreachable."),
    Setting("kubernetes", "taint_token_file", str, "/var/lib/sco-agent-token/kube-taint-token", "Token used only to patch this Node (taints need it: NodeRestriction refuses a node identity its own taints), as deploy/kubernetes/token-daemonset.yaml keeps it, in a directory of its own: the only host path that pod can write. Empty or missing: token_file, and a refused taint leaves a cordon without it. See docs/kubernetes.md."),
    Setting("kubernetes", "fallback_command", list, ["systemctl", "poweroff"], "Run (argv, no shell) at most once per notice, as a last resort, while the API server stays unreachable: only for the contract's fallback.kinds (a reclaim by default) and no earlier than fallback.lead_s before the deadline, never in a dry run; logind holds the poweroff while kubelet's graceful node shutdown stops the pods (docs/kubernetes.md). Empty list: no fallback."),
    # [slurm]
    Setting("slurm", "conf", str, "/etc/slurm/slurm.conf", "SLURM_CONF given to every Slurm command."),
    Setting("slurm", "command_timeout_s", float, 12.0, "Per-command timeout; slurm's own MessageTimeout is 10 s."),
    # [agent_socket] -- checkpoint clients
    Setting("agent_socket", "path", str, "/run/sco-agent-socket/agent.sock", "Unix socket workloads connect to (hostPath for pods); its directory, created 0755, holds nothing else. Keep it out of runtime_dir (0700)."),
    Setting("agent_socket", "mode", str, "0666", "File mode of the socket, octal. 0666: any local user may connect (docs/agent-socket.md, Who can connect); 0660 with a group to restrict."),
    Setting("agent_socket", "group", str, "", "Group owning the socket (name or gid); empty keeps root's."),
    Setting("agent_socket", "max_clients", int, 1024, "Connections beyond this are refused with an error line."),
    # [spool]
    Setting("spool", "size_mb", int, 64, "Size of the preallocated spool file, MiB."),
    Setting("spool", "vector_url", str, "", "Vector http_server source URL; empty keeps events on disk only."),
    Setting("spool", "batch_max", int, 500, "Most events in one shipped batch."),
    # [metrics]
    Setting("metrics", "textfile", str, "", "Prometheus textfile for node_exporter; empty disables it."),
    # [executor]
    Setting("executor", "dry_run", bool, False, "Log every action the executor would take and take none."),
)


class ConfigError(ValueError):
    """The configuration file is unusable; the message names the key."""


# One typed, read-only class per section, so the type checker knows ``config.relay.servers`` is
# a list of strings. The fields repeat SETTINGS' keys by necessity (a checker reads classes, not
# tables); SETTINGS stays the source of defaults and reasons, and tests/common/test_config.py fails
# if a class's fields, their order or their types differ from the table's. NamedTuples again:
# no dataclasses import.
class NodeSection(NamedTuple):
    name: str
    hall: str
    node_class: str
    instance_id: str
    scheduler: str


class PathsSection(NamedTuple):
    runtime_dir: str
    state_dir: str


class RelaySection(NamedTuple):
    servers: list[str]
    credentials_file: str
    tls_ca: str
    tls_cert: str
    tls_key: str
    max_payload: int


class MetadataSection(NamedTuple):
    provider: str
    url: str
    poll_interval_s: float
    timeout_s: float
    max_body: int
    imds_token_ttl_s: int
    allow_imdsv1: bool


class ContractSection(NamedTuple):
    launch_path: str
    trust_dir: str
    url: str
    refresh_s: float


class KubernetesSection(NamedTuple):
    api_url: str
    token_file: str
    client_cert_file: str
    client_key_file: str
    ca_file: str
    timeout_s: float
    taint_token_file: str
    fallback_command: list[str]


class SlurmSection(NamedTuple):
    conf: str
    command_timeout_s: float


class AgentSocketSection(NamedTuple):
    path: str
    mode: str
    group: str
    max_clients: int


class SpoolSection(NamedTuple):
    size_mb: int
    vector_url: str
    batch_max: int


class MetricsSection(NamedTuple):
    textfile: str


class ExecutorSection(NamedTuple):
    dry_run: bool


class Config:
    """The validated configuration: ``config.relay.servers`` and so on."""

    __slots__ = (
        "agent_socket",
        "contract",
        "executor",
        "kubernetes",
        "metadata",
        "metrics",
        "node",
        "paths",
        "relay",
        "slurm",
        "source",
        "spool",
    )
    source: str
    node: NodeSection
    paths: PathsSection
    relay: RelaySection
    metadata: MetadataSection
    contract: ContractSection
    kubernetes: KubernetesSection
    slurm: SlurmSection
    agent_socket: AgentSocketSection
    spool: SpoolSection
    metrics: MetricsSection
    executor: ExecutorSection

    def __init__(self, values: dict[str, dict[str, Any]], source: str) -> None:
        self.source = source
        for name, section_class in SECTION_CLASSES.items():
            # Keyword construction: a key missing from, or extra to, the class is a TypeError here.
            setattr(self, name, section_class(**values[name]))

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {name: getattr(self, name)._asdict() for name in SECTION_CLASSES}

    def __repr__(self) -> str:
        return f"Config({self.source!r}, {self.as_dict()!r})"


# Section name in the file -> its class, in SETTINGS' order.
SECTION_CLASSES: dict[str, type[Any]] = {
    "node": NodeSection,
    "paths": PathsSection,
    "relay": RelaySection,
    "metadata": MetadataSection,
    "contract": ContractSection,
    "kubernetes": KubernetesSection,
    "slurm": SlurmSection,
    "agent_socket": AgentSocketSection,
    "spool": SpoolSection,
    "metrics": MetricsSection,
    "executor": ExecutorSection,
}


def defaults() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for s in SETTINGS:
        out.setdefault(s.section, {})[s.key] = list(s.default) if isinstance(s.default, list) else s.default
    return out


def build(raw: dict[str, Any], source: str = "<dict>") -> Config:
    """Validate a parsed TOML document against SETTINGS and fill in defaults."""
    known = {(s.section, s.key): s for s in SETTINGS}
    sections = {s.section for s in SETTINGS}
    values = defaults()
    for section, table in raw.items():
        if section not in sections:
            raise ConfigError(f"{source}: unknown section [{section}]")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        for key, value in table.items():
            setting = known.get((section, key))
            if setting is None:
                raise ConfigError(f"{source}: unknown key {section}.{key}")
            values[section][key] = _coerce(setting, value, source)
    if not values["node"]["name"]:
        # os.uname() is what socket.gethostname() reads on Linux, without importing socket.
        values["node"]["name"] = os.uname().nodename.split(".")[0]
    _check_semantics(values, source)
    return Config(values, source)


def load(path: str | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Load the file named by ``path``, else $SCO_AGENT_CONFIG, else the default path.

    A missing default file means "all defaults"; a missing file that was named
    explicitly is an error. ``overrides`` (tests) are merged over the file.
    """
    explicit = path or os.environ.get(ENV_PATH)
    path = explicit or DEFAULT_PATH
    raw: dict[str, Any] = {}
    if os.path.exists(path):
        refuse_if_world_writable(path)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
    elif explicit:
        raise ConfigError(f"{path}: no such configuration file")
    for section, table in (overrides or {}).items():
        raw.setdefault(section, {}).update(table)
    return build(raw, path)


def refuse_if_world_writable(path: str) -> None:
    """Anyone able to write the config (or its directory) could redirect the drain: refuse."""
    for p in (path, os.path.dirname(os.path.abspath(path))):
        st = os.stat(p)
        if st.st_mode & stat.S_IWOTH and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
            raise ConfigError(f"{p}: world-writable; refusing to trust it (chmod o-w {p})")


def render_toml() -> str:
    """The documented configuration file: every key, its default and why."""
    lines = [
        "# sco-agent configuration. Every key is optional; the value shown is the default.",
        "# Generated from common/config.py (SETTINGS); edit there, then run",
        "#   python -m common.config > deploy/sco-agent.toml",
    ]
    current = None
    for s in SETTINGS:
        if s.section != current:
            lines += ["", f"[{s.section}]"]
            current = s.section
        lines.append(f"# {s.comment}")
        lines.append(f"{s.key} = {_toml_value(s.default)}")
    return "\n".join(lines) + "\n"


def _coerce(setting: Setting, value: Any, source: str) -> Any:
    name = f"{setting.section}.{setting.key}"
    if setting.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if setting.type is float and isinstance(value, float) and not math.isfinite(value):
        # TOML has nan and inf; no interval or timeout can be either (nan even passes "> 0").
        raise ConfigError(f"{source}: {name} must be a finite number, got {value}")
    if setting.type is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{source}: {name} must be a list of strings")
        return value
    if not isinstance(value, setting.type) or (setting.type is int and isinstance(value, bool)):
        raise ConfigError(f"{source}: {name} must be {setting.type.__name__}, got {type(value).__name__}")
    return value


def _check_semantics(values: dict[str, dict[str, Any]], source: str) -> None:
    node = values["node"]
    if node["scheduler"] not in ("kubernetes", "slurm", "none"):
        raise ConfigError(f"{source}: node.scheduler must be kubernetes, slurm or none")
    if values["metadata"]["provider"] not in ("aws", "gcp", "azure", "sco", "none"):
        raise ConfigError(f"{source}: metadata.provider must be aws, gcp, azure, sco or none")
    if values["metadata"]["poll_interval_s"] <= 0:
        raise ConfigError(f"{source}: metadata.poll_interval_s must be > 0")
    if not 1 <= values["metadata"]["imds_token_ttl_s"] <= 21600:
        raise ConfigError(f"{source}: metadata.imds_token_ttl_s must be within 1..21600")
    try:
        socket_mode = int(values["agent_socket"]["mode"], 8)
    except ValueError:
        raise ConfigError(f"{source}: agent_socket.mode must be an octal string like '0660'") from None
    if not 0 <= socket_mode <= 0o777:
        raise ConfigError(f"{source}: agent_socket.mode must be a file mode within 0000..0777")
    if values["spool"]["size_mb"] < 1:
        raise ConfigError(f"{source}: spool.size_mb must be >= 1")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


if __name__ == "__main__":
    print(render_toml(), end="")
