"""Slurm's command-line tools, for this node only (adapter over subprocess).

pyslurm cannot be used (it needs an exact Slurm version match), so every call
is a CLI run with its own timeout and ``SLURM_CONF`` from the agent's
configuration (without it even ``sinfo -V`` dies on a DNS SRV lookup).

The agent may drain, resume, signal, requeue and cancel on its own node only
(DESIGN section 8), and checks that itself: every node argument must be its
own name, and a job may be acted on only after ``jobs_on`` listed it on this
node (``scancel`` additionally carries ``-w <node>``, so Slurm applies the same
filter). A refusal raises ``NotOwnNode`` before any command runs.

Facts this relies on (shared/research/slurm.md): a stopped slurmctld fails
``scontrol ping`` in milliseconds but every other command only after
MessageTimeout; a hung one fails everything after MessageTimeout, hence the
short ping timeout. ``sinfo -n NODE`` can report a stale state, so the
"drained" fact comes from a whole-cluster ``sinfo -N`` read for our line.
"""
from __future__ import annotations

import os
import subprocess
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# A live controller answers a ping in 2-7 ms; a hung one never does. Two seconds
# tells them apart without stalling the executor's loop for a whole MessageTimeout.
PING_TIMEOUT_S = 2.0
COMMANDS_KEPT = 256

# stderr fragments meaning "no answer from slurmctld" rather than "refused".
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                "Zero Bytes were transmitted", "Communication connection failure")
# scontrol requeue: the job has requeue disabled (--no-requeue or JobRequeue=0).
_NOT_REQUEUEABLE = "presently disabled"
# The job is gone or already on its way out: the goal of the call is already met.
_ALREADY = ("Invalid job id", "Job is pending execution", "already completing or completed",
            "Job/step already completing")
# Slurm's own variables of the agent's environment must not leak into its calls.
_SLURM_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_", "SCANCEL_")

Runner = Callable[..., subprocess.CompletedProcess[str]]   # subprocess.run with text=True


class SlurmError(Exception):
    """A Slurm command failed; ``message`` is its stderr (or stdout), trimmed."""

    def __init__(self, argv: Iterable[str], rc: int, message: str) -> None:
        self.argv = tuple(argv)
        self.rc = rc
        self.message = message.strip()[:500]
        super().__init__(f"{' '.join(self.argv[:3])}... rc {rc}: {self.message}")


class Unreachable(SlurmError):
    """slurmctld did not answer (timeout, refused, down). The call may still land later."""


class NotRequeueable(SlurmError):
    """``scontrol requeue`` refused: the job has requeue disabled."""


class NotOwnNode(Exception):
    """A call would act on another node, or on a job not seen on this node: refused by the agent."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One ``scontrol -o show node`` line, reduced to what the drain needs."""

    name: str
    flags: frozenset[str]  # State=IDLE+DRAIN -> {"IDLE", "DRAIN"}
    reason: str

    @property
    def drain_set(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def state(self) -> str:
        return "+".join(sorted(self.flags))


@dataclass(frozen=True, slots=True)
class PidRow:
    """One row of ``scontrol listpids``: a process slurmstepd tracks for a job step."""

    pid: int
    job: int
    step: str     # "batch", "extern", "0", ...
    localid: str  # "0" for the first task of the step (the batch shell), "-" for its children


def _uint(text: str) -> bool:
    # str.isdigit() alone accepts '²' and other digits int() refuses.
    return text.isascii() and text.isdigit()


def parse_kv(line: str) -> dict[str, str]:
    """One ``scontrol -o show ...`` line as a dict; values may hold spaces (Reason=...)."""
    out: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        name, sep, value = token.partition("=")
        if sep and name and name.replace("/", "").replace(":", "").isalnum():
            key, out[name] = name, value
        elif key is not None:
            out[key] += " " + token
    return out


def parse_listpids(text: str) -> list[PidRow]:
    """Rows of ``scontrol listpids``; non-positive PIDs (seen at step start) are dropped."""
    rows = []
    for line in text.splitlines()[1:]:  # the first line is the header
        f = line.split()
        if len(f) >= 4 and _uint(f[0]) and _uint(f[1]) and int(f[0]) > 1:
            rows.append(PidRow(int(f[0]), int(f[1]), f[2], f[3]))
    return rows


def parse_job_ids(text: str) -> list[int]:
    return sorted({int(t) for t in text.split() if _uint(t)})


def classify(argv: Iterable[str], rc: int, stderr: str) -> SlurmError:
    if any(s in stderr for s in _UNREACHABLE):
        return Unreachable(argv, rc, stderr)
    if _NOT_REQUEUEABLE in stderr:
        return NotRequeueable(argv, rc, stderr)
    return SlurmError(argv, rc, stderr)


class Probe:
    """A ``scontrol ping`` running in the background, so a hung controller never blocks the loop."""

    def __init__(self, proc: subprocess.Popen[bytes], started: float, timeout_s: float) -> None:
        self.proc = proc
        self.started = started
        self.timeout_s = timeout_s

    def result(self, now: float) -> bool | None:
        """True: the controller answered; False: it did not (or timed out); None: still waiting."""
        rc = self.proc.poll()
        if rc is None:
            if now - self.started < self.timeout_s:
                return None
            self.proc.kill()
            self.proc.wait()
            return False
        return rc == 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class SlurmCli:
    """Slurm's CLIs for the node ``node``; see the module docstring."""

    def __init__(self, node: str, conf: str, timeout_s: float = 12.0,
                 ping_timeout_s: float = PING_TIMEOUT_S, run: Runner = subprocess.run,
                 audit: Callable[[tuple[str, ...]], None] | None = None) -> None:
        if not node:
            raise ValueError("SlurmCli needs this node's name")
        self.node = node
        self.conf = conf
        self.timeout_s = timeout_s
        self.ping_timeout_s = ping_timeout_s
        self._run_fn = run
        self._audit = audit  # told of every command that changes something, before it runs
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_ENV_PREFIXES)}
        self.env["SLURM_CONF"] = conf
        # Every command run, newest last: the audit trail tests grep for other nodes' names.
        self.commands: deque[tuple[str, ...]] = deque(maxlen=COMMANDS_KEPT)
        self._seen: set[int] = set()  # jobs the last jobs_on() listed on this node

    # -- plumbing ------------------------------------------------------------------
    def _own(self, node: str) -> str:
        if node != self.node:
            raise NotOwnNode(f"refusing to act on node {node!r}: this agent is {self.node!r}")
        return node

    def _job(self, job: int) -> str:
        if job not in self._seen:
            raise NotOwnNode(f"refusing to act on job {job}: not listed on node {self.node!r}")
        return str(job)

    def _run(self, *argv: str, timeout: float | None = None) -> str:
        self.commands.append(argv)
        try:
            res = self._run_fn(list(argv), capture_output=True, text=True, env=self.env,
                               timeout=timeout or self.timeout_s, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise Unreachable(argv, -1, f"no answer within {timeout or self.timeout_s} s") from None
        except OSError as e:
            raise SlurmError(argv, -1, f"cannot run {argv[0]}: {e}") from None
        if res.returncode != 0:
            raise classify(argv, res.returncode, (res.stderr or res.stdout or "").strip())
        return res.stdout

    def _change(self, *argv: str) -> str:
        if self._audit is not None:
            self._audit(argv)
        return self._run(*argv)

    # -- the controller ----------------------------------------------------------
    def ping(self) -> bool:
        """True if slurmctld answers within the short ping timeout."""
        try:
            self._run("scontrol", "ping", timeout=self.ping_timeout_s)
        except SlurmError:
            return False
        return True

    def start_ping(self, now: float) -> Probe:
        argv = ("scontrol", "ping")
        self.commands.append(argv)
        proc = subprocess.Popen(list(argv), env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return Probe(proc, now, self.ping_timeout_s)

    # -- reading -------------------------------------------------------------------
    def node_info(self, node: str) -> NodeInfo:
        kv = parse_kv(self._run("scontrol", "-o", "show", "node", self._own(node)).strip())
        if kv.get("NodeName") != node:
            raise SlurmError(("scontrol", "show", "node"), 0, f"no line for node {node!r}")
        reason = kv.get("Reason", "")
        # scontrol appends " [user@time]" to a reason; keep the text the setter gave.
        if reason.endswith("]") and " [" in reason:
            reason = reason[:reason.rindex(" [")]
        return NodeInfo(node, frozenset(kv.get("State", "").split("+")) - {""}, reason)

    def node_state(self, node: str) -> str:
        """``sinfo`` %T for ``node`` (drained, draining, mixed, idle*, ...), from a whole-cluster read."""
        self._own(node)
        for line in self._run("sinfo", "-h", "-N", "-o", "%N %T").splitlines():
            name, _, state = line.strip().partition(" ")
            if name == node:
                return state
        return ""

    def jobs_on(self, node: str, states: str) -> list[int]:
        """Ids of the jobs on ``node`` in ``states`` (squeue's -t syntax: RUNNING, R,CG,S, ...)."""
        jobs = parse_job_ids(self._run("squeue", "-h", "-w", self._own(node), "-t", states, "-o", "%A"))
        self._seen.update(jobs)
        return jobs

    def listpids(self) -> list[PidRow]:
        """Processes of the job steps on this host; works with slurmctld and slurmd down."""
        try:
            return parse_listpids(self._run("scontrol", "listpids"))
        except SlurmError as e:
            if "No job steps exist" in e.message:
                return []
            raise

    # -- acting --------------------------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        self._change("scontrol", "update", f"nodename={self._own(node)}", "state=DRAIN", f"reason={reason}")

    def resume(self, node: str) -> None:
        self._change("scontrol", "update", f"nodename={self._own(node)}", "state=RESUME")

    def signal(self, node: str, job: int, sig: str, scope: str) -> None:
        """``scancel --signal`` to the batch shell (scope 'batch') or every step ('full').

        One of --batch/--full is required: without it nothing reaches a batch script and rc is
        still 0. ``sig`` is the C name (SIGUSR1); scancel wants it without the prefix.
        """
        flag = {"batch": "--batch", "full": "--full"}[scope]
        name = sig.removeprefix("SIG")
        self._change("scancel", f"--signal={name}", flag, "-w", self._own(node), self._job(job))

    def requeue(self, node: str, job: int) -> bool:
        """Requeue ``job``; False if it was already gone or on its way out. NotRequeueable if refused."""
        self._own(node)
        try:
            self._change("scontrol", "requeue", self._job(job))
        except SlurmError as e:
            # Only a plain refusal can mean "already gone": not a timeout, not a disabled requeue.
            if type(e) is SlurmError and any(s in e.message for s in _ALREADY):
                return False
            raise
        return True

    def cancel(self, node: str, job: int) -> None:
        self._change("scancel", "-w", self._own(node), self._job(job))
