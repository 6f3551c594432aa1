"""Paths and slurm.conf of the one-node test rig, as pure functions over plain data.

Everything the rig writes lives under one base directory, so two rigs never share a
file and nothing touches /etc/slurm, /etc/munge or /run/munge. The settings come from
shared/research/slurm.md (what was measured to work on these machines); each one
carries its reason, which is written as a comment above it in the generated file.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RigPaths:
    """Every file and directory of one rig, derived from its base directory."""

    base: str

    def _p(self, *parts: str) -> str:
        return os.path.join(self.base, *parts)

    @property
    def rig_json(self) -> str:
        return self._p("rig.json")

    @property
    def conf(self) -> str:
        return self._p("etc", "slurm.conf")

    @property
    def plugstack(self) -> str:
        return self._p("etc", "plugstack.conf")

    @property
    def munge_dir(self) -> str:
        return self._p("munge")

    @property
    def munge_socket(self) -> str:
        return self._p("munge", "munge.socket")

    @property
    def munge_key(self) -> str:
        return self._p("munge", "munge.key")

    @property
    def state_dir(self) -> str:
        return self._p("state")

    @property
    def spool_dir(self) -> str:
        return self._p("spool")

    @property
    def log_dir(self) -> str:
        return self._p("log")

    @property
    def run_dir(self) -> str:
        return self._p("run")

    @property
    def jobs_dir(self) -> str:
        return self._p("jobs")

    def pid_file(self, daemon: str) -> str:
        return self._p("run", f"{daemon}.pid")

    def log_file(self, daemon: str) -> str:
        return self._p("log", f"{daemon}.log")


def node_line(slurmd_c_output: str, addr: str = "127.0.0.1") -> str:
    """The NodeName line for slurm.conf from ``slurmd -C`` output, pinned to ``addr``.

    slurmd registers under ``hostname -s`` and refuses a NodeName that differs, so the
    line is taken from slurmd's own view of the machine rather than composed by hand.
    """
    for raw in slurmd_c_output.splitlines():
        line = raw.strip()
        if line.startswith("NodeName="):
            fields = [f for f in line.split() if not f.startswith("NodeAddr=")]
            return " ".join([*fields, f"NodeAddr={addr}"])
    raise ValueError(f"no NodeName= line in slurmd -C output: {slurmd_c_output!r}")


def node_name_of(line: str) -> str:
    """The node name of a ``NodeName=...`` line."""
    first = line.split(maxsplit=1)[0]
    if not first.startswith("NodeName="):
        raise ValueError(f"not a NodeName line: {line!r}")
    return first.split("=", 1)[1]


def settings(paths: RigPaths, ctld_port: int, slurmd_port: int) -> list[tuple[str, str, str]]:
    """The rig's slurm.conf settings as (key, value, why) in file order."""
    return [
        ("ClusterName", "scorig", "required by slurmctld; the name is local to this rig's state dir"),
        ("SlurmctldHost", "localhost", "one-node rig: the controller runs beside slurmd"),
        ("SlurmctldPort", str(ctld_port), "chosen free at start: two rigs or a distro Slurm never clash"),
        ("SlurmdPort", str(slurmd_port), "chosen free at start, like SlurmctldPort"),
        ("AuthType", "auth/munge", "the only authentication Debian's packages ship"),
        ("CredType", "cred/munge", "job credentials signed by the same private munged"),
        ("AuthInfo", f"socket={paths.munge_socket}",
         "the rig's own munged socket: nothing touches /run/munge or /etc/munge"),
        ("SlurmUser", "root", "the rig runs as root; no slurm account needed"),
        ("SlurmdUser", "root", "slurmd must be root to launch jobs as their owner"),
        ("StateSaveLocation", paths.state_dir,
         "controller state; a restart with plain -f recovers running jobs from it"),
        ("SlurmdSpoolDir", paths.spool_dir,
         "stepd sockets live here: scontrol listpids works with both daemons down"),
        ("SlurmctldPidFile", paths.pid_file("slurmctld"), "under the rig dir, never /run"),
        ("SlurmdPidFile", paths.pid_file("slurmd"), "under the rig dir, never /run"),
        ("SlurmctldLogFile", paths.log_file("slurmctld"), "kept with the rig for post-mortems"),
        ("SlurmdLogFile", paths.log_file("slurmd"), "kept with the rig for post-mortems"),
        ("PlugStackConfig", paths.plugstack, "an empty SPANK stack: /etc/slurm/plugstack.conf is not ours"),
        ("MailProg", "/bin/true", "no mail on this machine; the default would log errors"),
        ("ProctrackType", "proctrack/pgid",
         "cgroup breaks every job launch here (no freezer); linuxproc leaks re-parented children"),
        ("TaskPlugin", "task/none", "no cgroup or affinity binding on this machine"),
        ("SelectType", "select/cons_tres", "several small test jobs can share the node"),
        ("SelectTypeParameters", "CR_Core", "cores are the consumable resource (memory is not tracked)"),
        ("SchedulerType", "sched/backfill",
         "the Debian default; a job starts on the next pass (0.2-3 s here, later while one completes)"),
        ("ReturnToService", "2", "a node marked DOWN returns to service when slurmd registers"),
        ("MpiDefault", "none", "batch jobs only; no PMI plugin wanted"),
        ("AccountingStorageType", "accounting_storage/none", "no slurmdbd on a test rig"),
        ("JobAcctGatherType", "jobacct_gather/none", "no accounting, nothing to gather"),
        ("JobCompType", "jobcomp/none", "no job completion log"),
        ("MessageTimeout", "10",
         "the default, so calls to a stopped controller fail as the agent will see them (after 9 s)"),
        ("KillWait", "5",
         "tests: a job ignoring SIGTERM is SIGKILLed after 5 s, not the default 30 s"),
        ("SlurmdTimeout", "300", "slurmd may be stopped for a while in tests without the node going DOWN"),
        ("InactiveLimit", "0", "batch jobs only; never cancel for an absent srun"),
    ]


def render_conf(
    paths: RigPaths,
    node: str,
    ctld_port: int,
    slurmd_port: int,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """The text of slurm.conf; ``overrides`` replace a setting (case-insensitive key) or add one."""
    extra = {k.lower(): (k, v) for k, v in (overrides or {}).items()}
    lines = ["# Generated by tests/rigs/slurm_rig.py for a one-node test rig. Do not edit.", ""]
    for key, default, reason in settings(paths, ctld_port, slurmd_port):
        override = extra.pop(key.lower(), None)
        why, value = reason, default
        if override is not None:
            why, value = f"overridden by the test (default {default}: {reason})", override[1]
        lines += [f"# {why}", f"{key}={value}"]
    for key, value in extra.values():
        lines += ["# added by the test", f"{key}={value}"]
    lines += [
        "",
        "# From `slurmd -C`: NodeName must equal `hostname -s`; loopback keeps the rig off the network.",
        node,
        "PartitionName=rig Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ]
    return "\n".join(lines)


def parse_kv(line: str) -> dict[str, str]:
    """Parse one ``scontrol -o show ...`` line; values may hold spaces (Reason=...)."""
    out: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        name, sep, value = token.partition("=")
        if sep and name and (name.replace("/", "").replace(":", "").isalnum()):
            key, out[name] = name, value
        elif key is not None:
            out[key] += " " + token
    return out

