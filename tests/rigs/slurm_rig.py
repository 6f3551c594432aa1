"""A real one-node Slurm cluster for tests: munged, slurmctld and slurmd under one directory.

Built from Debian's packages (tests/rigs/slurm/install.sh) with the settings measured in
shared/research/slurm.md. The daemons run in their usual daemon mode, without
systemd; the rig records their PIDs the moment they start (they delete their own pid
files on exit) and signals only those processes, checked against /proc each time.

    with SlurmRig(tmp_path) as rig:          # or rig.start() ... rig.stop()
        job = rig.sbatch("#!/bin/bash\\nsleep 60 & wait $!\\n")
        rig.wait_job_state(job, "RUNNING")
        rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=DRAIN", "reason=test")

From a shell (state kept in DIR/rig.json):

    eval "$(python -m tests.rigs.slurm_rig start DIR)"   # prints export SLURM_CONF=...
    python -m tests.rigs.slurm_rig stop DIR
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Self, TypeVar

from common.fsutil import write_atomic
from tests.rigs.slurm import conf, procs
from tests.support.wait import wait_for

T = TypeVar("T")

# In the daemons' environment only, so their helpers (slurmstepd, slurmscriptd) can be found
# and stopped even when a daemon died; clients and jobs never carry it.
DAEMON_MARKER = "SCO_SLURM_RIG_DAEMON"
_SLURM_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_", "SCANCEL_")


class RigError(RuntimeError):
    """The rig could not reach the state asked for; the message names the log to read."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free right now (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))  # all addresses: slurmctld and slurmd bind 0.0.0.0
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmRig:
    """One-node Slurm cluster rooted at ``base_dir``; see the module docstring."""

    def __init__(self, base_dir: str | os.PathLike[str], conf_overrides: Mapping[str, str] | None = None,
                 start_timeout: float = 30.0, stop_timeout: float = 10.0) -> None:
        self.paths = conf.RigPaths(os.path.abspath(os.fspath(base_dir)))
        self.conf_overrides = dict(conf_overrides or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.node_name = ""
        self.ports: dict[str, int] = {}
        self.daemons: dict[str, procs.Proc] = {}
        self._job_seq = 0

    # ----------------------------------------------------------------- properties

    @property
    def base_dir(self) -> str:
        return self.paths.base

    @property
    def conf_path(self) -> str:
        return self.paths.conf

    @property
    def env(self) -> dict[str, str]:
        """Environment for every client call: without SLURM_CONF even ``sinfo -V`` fails.

        Slurm variables of the caller's own environment are dropped: sbatch reads SLURM_* and
        SBATCH_* as options, and a test run inside a Slurm job must not inherit that job's.
        """
        own = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_ENV_PREFIXES)}
        return {**own, "SLURM_CONF": self.paths.conf}

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Write the configuration, start the three daemons, return once the node is idle."""
        known = self.daemons or (SlurmRig.load(self.base_dir).daemons if os.path.exists(self.paths.rig_json) else {})
        if any(procs.is_alive(p) for p in known.values()):
            raise RigError(f"a rig in {self.base_dir} is already running (stop it first)")
        # A fresh cluster every start: jobs recovered from an earlier run's state would hold
        # the node `mixed` until slurmd reports them gone. (start_controller() does recover.)
        for d in (self.paths.state_dir, self.paths.spool_dir):
            shutil.rmtree(d, ignore_errors=True)
        for d in (self.paths.munge_dir, self.paths.state_dir, self.paths.spool_dir,
                  self.paths.log_dir, self.paths.run_dir, self.paths.jobs_dir, os.path.dirname(self.conf_path)):
            os.makedirs(d, exist_ok=True)
        # munged refuses a socket directory that others cannot search, or a key others can read.
        os.chmod(self.paths.munge_dir, 0o755)
        if not os.path.exists(self.paths.munge_key):
            self._exec(["mungekey", "-c", "-k", self.paths.munge_key], "mungekey")
        os.chmod(self.paths.munge_key, 0o600)
        self._write_conf()
        try:
            self._start_daemon("munged")
            self._start_daemon("slurmctld")
            self._wait_controller()
            self._start_daemon("slurmd")
            self.wait_node_state("idle", timeout=self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process the rig started (daemons, helpers, leftover jobs); raises if one survives.

        Jobs and their slurmstepds get SIGKILL at once (test jobs have nothing to save);
        the daemons get SIGTERM together, then SIGKILL after ``stop_timeout``.
        """
        jobs, helpers = self._strays()
        procs.kill_now(jobs, timeout=0)
        for p in self.daemons.values():
            procs.send(p, signal.SIGCONT)  # a test may have frozen one to play a hung daemon
        survivors = procs.terminate([*self.daemons.values(), *helpers], self.stop_timeout)
        # A job may have been launched between the scan and the daemons' exit.
        late_jobs, late_helpers = self._strays()
        survivors += procs.kill_now([*jobs, *late_jobs, *late_helpers])
        self.daemons = {}
        self._save()
        if survivors:
            raise RigError(f"processes survived SIGKILL: {survivors}")

    def stop_controller(self) -> None:
        """Stop slurmctld alone (jobs and slurmd keep running)."""
        self._stop_daemon("slurmctld")

    def start_controller(self) -> None:
        """Restart slurmctld from its state directory and wait until it answers."""
        self._start_daemon("slurmctld")
        self._wait_controller()

    def stop_slurmd(self) -> None:
        """Stop slurmd alone: its jobs keep running (SIGTERM to slurmd signals no job)."""
        self._stop_daemon("slurmd")

    def start_slurmd(self) -> None:
        """Restart slurmd; it picks up the jobs still running under their slurmstepd."""
        self._start_daemon("slurmd")

    def signal_daemon(self, name: str, sig: int) -> bool:
        """Send ``sig`` to one daemon (munged, slurmctld, slurmd) if it is still the one started.

        SIGSTOP / SIGCONT to slurmctld play a hung controller; stop() sends SIGCONT first.
        """
        proc = self.daemons.get(name)
        return proc is not None and procs.send(proc, sig)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- clients

    def run(self, *cmd: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a client command with the rig's environment; ``check`` raises RigError on rc != 0."""
        res = subprocess.run(list(cmd), check=False, env=self.env, capture_output=True, text=True,
                             timeout=timeout, cwd=self.paths.jobs_dir)
        if check and res.returncode != 0:
            raise RigError(f"{' '.join(cmd)} -> rc {res.returncode}: {res.stderr.strip() or res.stdout.strip()}")
        return res

    def sbatch(self, script_text: str, **opts: object) -> int:
        """Submit ``script_text`` as a batch job; returns its id.

        ``opts`` become sbatch options (``job_name="x"`` -> ``--job-name=x``; True -> a bare
        flag; None/False -> omitted). Output goes to jobs/slurm-<id>.out unless ``output`` is given.
        """
        self._job_seq += 1
        script = os.path.join(self.paths.jobs_dir, f"job-{os.getpid()}-{self._job_seq}.sh")
        with open(script, "w") as f:
            f.write(script_text)
        opts = {"output": os.path.join(self.paths.jobs_dir, "slurm-%j.out"), **opts}
        args = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}")
                for k, v in opts.items() if v is not None and v is not False]
        out = self.run("sbatch", "--parsable", *args, script).stdout.strip()
        return int(out.split(";")[0])

    def node_state(self) -> str:
        """The node's state as ``sinfo %T`` prints it: idle, mixed, draining, drained, idle*, ...

        Asks for every node and picks ours: ``sinfo -n N`` (a single-node query) was seen here
        to report a stale ``mixed`` after DRAIN, job end and RESUME, for as long as it was
        polled; only a full node query refreshes slurmctld's allocation counts (22.05.8).
        """
        for line in self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines():
            name, _, state = line.strip().partition(" ")
            if name == self.node_name:
                return state
        return ""

    def node_info(self) -> dict[str, str]:
        return conf.parse_kv(self.run("scontrol", "-o", "show", "node", self.node_name).stdout.strip())

    def job_info(self, job_id: int) -> dict[str, str]:
        """``scontrol -o show job`` as a dict; {} once the controller has forgotten the job."""
        res = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        return conf.parse_kv(res.stdout.strip()) if res.returncode == 0 else {}

    def job_state(self, job_id: int) -> str:
        """PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, ... ("" if unknown)."""
        return self.job_info(job_id).get("JobState", "")

    def jobs(self, states: str = "PD,R,CG,S") -> list[int]:
        """Ids of the jobs in ``states`` (squeue's -t syntax)."""
        out = self.run("squeue", "-h", "-t", states, "-o", "%A").stdout.split()
        return [int(j) for j in out]

    def controller_up(self) -> bool:
        return self.run("scontrol", "ping", timeout=15.0, check=False).returncode == 0

    def job_pids(self, job_id: int | None = None) -> list[int]:
        """PIDs of a job's steps on this node (``scontrol listpids``; works with the daemons down).

        Raw, as Slurm reports them (minus non-positive ones). Beware: in the first ~30 ms of a
        batch step, proctrack/pgid reports PID -1 for the shell and lists every process of
        process group 0 (PID 1, kernel threads). Never signal these PIDs unchecked.
        """
        cmd = ["scontrol", "listpids"] + ([str(job_id)] if job_id is not None else [])
        res = self.run(*cmd, check=False)
        pids = []
        for line in res.stdout.splitlines()[1:]:  # first line is the header
            field = line.split()[0] if line.split() else ""
            if field.isdigit() and int(field) > 0:
                pids.append(int(field))
        return pids

    # ----------------------------------------------------------------- waiting

    def wait_for(self, predicate: Callable[[], T], timeout: float = 15.0, interval: float = 0.05,
                 what: str | Callable[[], str] = "") -> T:
        """Poll ``predicate`` until it returns something truthy (returned) or raise TimeoutError.

        ``what`` names the condition in the error; a callable is asked only then (last state).
        """
        return wait_for(predicate, timeout, what or repr(predicate), interval, retry_on=())

    def wait_node_state(self, *states: str, timeout: float = 15.0) -> str:
        return self.wait_for(lambda: (s := self.node_state()) in states and s, timeout,
                             what=lambda: f"node {self.node_name} in {states} (last: {self._last_node_state()})")

    def wait_job_state(self, job_id: int, *states: str, timeout: float = 15.0) -> str:
        return self.wait_for(lambda: (s := self.job_state(job_id)) in states and s, timeout,
                             what=lambda: f"job {job_id} in {states} (last: {self.job_state(job_id) or '-'})")

    def reset(self, timeout: float = 30.0) -> None:
        """Back to an idle node with no jobs: cancel all, resume if drained. Cheap when clean."""
        if self.jobs():
            self.run("scancel", *map(str, self.jobs()), check=False)
            self.wait_for(lambda: not self.jobs(), timeout, what="all jobs gone")
        if self.node_state() != "idle":
            self.run("scontrol", "update", f"nodename={self.node_name}", "state=RESUME", check=False)
            self.wait_node_state("idle", timeout=timeout)

    # ----------------------------------------------------------------- internals

    def _write_conf(self) -> None:
        node = conf.node_line(self._exec(["slurmd", "-C"], "slurmd -C"))
        self.node_name = conf.node_name_of(node)
        self.ports = dict(zip(("slurmctld", "slurmd"), free_ports(2), strict=False))
        text = conf.render_conf(self.paths, node, self.ports["slurmctld"], self.ports["slurmd"],
                                self.conf_overrides)
        write_atomic(self.conf_path, text.encode(), 0o644)
        write_atomic(self.paths.plugstack, b"", 0o644)

    def _daemon_argv(self, name: str) -> tuple[list[str], str]:
        """(argv, marker): the marker is what the live process's command line must contain."""
        if name == "munged":
            p = self.paths
            # --force: munged also wants every directory above the socket searchable by all,
            # and pytest's temp dirs are 0700. Every client of this munged runs as root.
            return ["munged", "--force", f"--socket={p.munge_socket}", f"--key-file={p.munge_key}",
                    f"--pid-file={p.pid_file('munged')}", f"--log-file={p.log_file('munged')}",
                    f"--seed-file={os.path.join(p.munge_dir, 'munged.seed')}"], p.munge_socket
        # Plain -f, never -c: slurmctld must recover its jobs from StateSaveLocation.
        return [name, "-f", self.conf_path], self.conf_path

    def _start_daemon(self, name: str) -> None:
        pid_file = self.paths.pid_file(name)
        if os.path.exists(pid_file):
            os.unlink(pid_file)  # a stale file from a killed run would name someone else
        argv, marker = self._daemon_argv(name)
        self._exec(argv, name)  # returns when the daemon has forked into the background
        proc = self.wait_for(lambda: self._read_pid_file(pid_file, name, marker), self.start_timeout,
                             what=f"{name} pid file {pid_file} (see {self.paths.log_file(name)})")
        self.daemons[name] = proc
        self._save()

    def _stop_daemon(self, name: str) -> None:
        proc = self.daemons.pop(name, None)
        if proc is not None and procs.terminate([proc], self.stop_timeout):
            raise RigError(f"{name} pid {proc.pid} survived SIGKILL")
        self._save()

    @staticmethod
    def _read_pid_file(path: str, comm: str, marker: str) -> procs.Proc | None:
        try:
            with open(path) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return None
        proc = procs.identify(pid, marker) if pid > 0 else None
        return proc if proc is not None and proc.comm == comm and procs.is_alive(proc) else None

    def _wait_controller(self) -> None:
        self.wait_for(self.controller_up, self.start_timeout,
                      what=f"slurmctld answering ping (see {self.paths.log_file('slurmctld')})")

    def _last_node_state(self) -> str:
        try:
            return self.node_state() or "-"
        except (RigError, subprocess.TimeoutExpired) as e:
            return str(e)

    def _strays(self) -> tuple[list[procs.Proc], list[procs.Proc]]:
        skip = procs.ancestors() | {p.pid for p in self.daemons.values()}
        return procs.rig_strays(self.conf_path, DAEMON_MARKER, self.base_dir, exclude=skip)

    def _exec(self, argv: Sequence[str], what: str) -> str:
        env = {**self.env, DAEMON_MARKER: self.base_dir}
        try:
            res = subprocess.run(list(argv), check=False, env=env, capture_output=True, text=True,
                                 timeout=self.start_timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError as e:
            raise RigError(f"{what}: {e} (run tests/rigs/slurm/install.sh)") from e
        if res.returncode != 0:
            raise RigError(f"{what} -> rc {res.returncode}: {res.stderr.strip()} {self._log_tail(what)}")
        return res.stdout

    def _log_tail(self, name: str) -> str:
        try:
            with open(self.paths.log_file(name.split(maxsplit=1)[0]), errors="replace") as f:
                return "| log: " + " / ".join(f.read().splitlines()[-5:])
        except OSError:
            return ""

    def _save(self) -> None:
        state = {"base_dir": self.base_dir, "node_name": self.node_name, "ports": self.ports,
                 "conf_overrides": self.conf_overrides,
                 "daemons": {k: v.to_json() for k, v in self.daemons.items()}}
        write_atomic(self.paths.rig_json, json.dumps(state, indent=1).encode(), 0o644)

    @classmethod
    def load(cls, base_dir: str | os.PathLike[str]) -> SlurmRig:
        """The rig recorded in ``base_dir/rig.json`` (as left by ``start`` in another process)."""
        rig = cls(base_dir)
        with open(rig.paths.rig_json) as f:
            state = json.load(f)
        rig.node_name, rig.ports = state["node_name"], state["ports"]
        rig.conf_overrides = state.get("conf_overrides", {})
        rig.daemons = {k: procs.Proc.from_json(v) for k, v in state["daemons"].items()}
        return rig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rigs.slurm_rig", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "env"))
    parser.add_argument("dir")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override or add a slurm.conf setting (start only)")
    args = parser.parse_args(argv)
    if args.action == "start":
        overrides = dict(kv.split("=", 1) for kv in args.set)
        rig = SlurmRig(args.dir, conf_overrides=overrides).start()
    else:
        rig = SlurmRig.load(args.dir)
    if args.action == "stop":
        rig.stop()
        return 0
    print(f"export SLURM_CONF={rig.conf_path}")
    print(f"export SLURM_RIG_NODE={rig.node_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
