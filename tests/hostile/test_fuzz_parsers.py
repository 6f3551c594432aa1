"""The remaining parsers of outside input, each fed anything: a result, or its own clear error.

Configuration file, NATS credentials, trust-directory keys, supervisord's
process-event payloads, Slurm's command output and job environments (a workload
controls its own environment), Vector's Retry-After, and the Kubernetes API's
pod and PDB objects as the drain plan reads them.
"""
from __future__ import annotations

import os
import string

import pytest
import ujson
from hypothesis import example, given
from hypothesis import strategies as st

from common import config as cfg
from common.wire import Budget, phase_ends
from executor.kube.book_records import Inputs
from executor.kube.eviction_book import EvictionBook
from executor.kube.pod_filters import pods_that_count
from executor.slurm import cli as slurm
from executor.slurm import local as slurm_local
from spool.shipping import retry_after_s
from supervisord_plugins import process_events
from tests.executor.kube.podspecs import pdb, pod
from tests.support.clocks import at
from tests.support.fuzzing import fuzz, json_values, mutated
from watcher import nats_creds
from watcher.contract_store import parse_public_key

# -- the configuration file ----------------------------------------------------------------

GOOD_CONFIG = {"node": {"name": "node-a", "hall": "h1", "scheduler": "slurm"},
               "metadata": {"provider": "gcp", "poll_interval_s": 5.0, "imds_token_ttl_s": 60},
               "relay": {"servers": ["nats://127.0.0.1:4222"]}, "agent_socket": {"mode": "0660"},
               "spool": {"size_mb": 8}}


@fuzz(300)
@given(mutated(GOOD_CONFIG) | json_values)
def test_config_values(raw):
    """Any parsed document: a Config, or a ConfigError naming the problem."""
    try:
        cfg.build(raw if isinstance(raw, dict) else {"x": raw})
    except cfg.ConfigError as e:
        assert str(e)


toml_lines = st.sampled_from(["[node]", "[relay]", "[nope]", 'name = "a"', "servers = []", "servers = [1]",
                              "size_mb = 0", "size_mb = 9999999999999999999999", "mode = 'x'", "a.b.c = 1",
                              "poll_interval_s = nan", "poll_interval_s = inf", "[[node]]", "= 1", "\x00"])


@fuzz(200)
@given(st.lists(toml_lines | st.text(max_size=30), max_size=8).map("\n".join) | st.binary(max_size=200))
def test_config_file(tmp_path_factory, text):
    """Any file: loaded, or refused with ConfigError (one clear line, exit 2 at start)."""
    path = tmp_path_factory.mktemp("cfg") / "agent.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    os.chmod(path, 0o600)
    try:
        cfg.load(str(path))
    except cfg.ConfigError as e:
        assert str(path) in str(e)


def test_nan_and_inf_settings_are_refused(tmp_path):
    """TOML allows nan and inf: nan passed 'poll_interval_s > 0' (it never compares), and a nan
    timeout made every socket call raise. Refused at start like any other bad value."""
    for value in ("nan", "inf", "-inf"):
        for key in ("poll_interval_s", "timeout_s"):
            p = tmp_path / f"{key}-{value}.toml"
            p.write_text(f"[metadata]\n{key} = {value}\n")
            with pytest.raises(cfg.ConfigError, match=key):
                cfg.load(str(p))


# -- credentials and keys ---------------------------------------------------------------------

CREDS = """-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJ4In0.c2ln
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU
------END USER NKEY SEED------
"""


@fuzz(200)
@given(st.text(alphabet=string.printable, max_size=300) | st.binary(max_size=300).map(
    lambda b: b.decode("latin-1")) | st.builds(lambda cut, junk: CREDS[:cut] + junk,
                                             st.integers(0, len(CREDS)), st.text(max_size=20)))
def test_nats_creds_file(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("creds") / "user.creds"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        jwt, seed = nats_creds.read_creds(str(path))
    except nats_creds.CredsError as e:
        assert str(e)
        return
    assert jwt.count(".") == 2 and len(seed) == 32


PEM = (b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
       b"-----END PUBLIC KEY-----\n")


@fuzz(200)
@given(st.binary(max_size=120) | st.builds(lambda cut, junk: PEM[:cut] + junk + PEM[cut:],
                                          st.integers(0, len(PEM)), st.binary(max_size=8)))
def test_trust_dir_key_file(data):
    try:
        assert len(parse_public_key(data)) == 32
    except ValueError as e:
        assert str(e)


# -- supervisord's process-state events (forwarded from inside supervisord) -----------------------

names = st.sampled_from(["PROCESS_STATE_EXITED", "PROCESS_STATE_FATAL", "PROCESS_STATE_RUNNING", "TICK_5", ""])
payloads = st.builds(lambda pid, rest: f"processname:watcher groupname:watcher from_state:RUNNING "
                                       f"expected:0 pid:{pid}{rest}",
                     st.sampled_from(["123", "\u00b2", "", "-4", "9" * 30]), st.text(max_size=20))


@fuzz(200)
@given(names, payloads | st.text(max_size=60))
@example("PROCESS_STATE_EXITED", "processname:w groupname:w from_state:RUNNING pid:\u00b2")
def test_process_event_payloads(name, payload):
    """Whatever supervisor's payload text holds: data for a watched event, None for another, never
    an exception (it runs inside supervisord's loop), and the pid an int or None."""
    data = process_events.event_data(name, payload)
    if name not in process_events.WATCHED:
        assert data is None
        return
    assert data is not None and data["state"] == process_events.WATCHED[name]
    assert data.get("pid") is None or isinstance(data["pid"], int)


# -- Slurm: command output, and the environments of processes on the node ----------------------

@fuzz(200)
@given(st.text(max_size=200) | st.sampled_from(["PID JOBID STEPID LOCALID GLOBALID\n12 ² batch 0 0\n",
                                                 "JobId=5 Reason=a b=c NodeList=n"]))
def test_slurm_output(text):
    for line in text.splitlines() or [""]:
        slurm.parse_kv(line)
    assert all(r.pid > 1 for r in slurm.parse_listpids(text))
    assert all(isinstance(j, int) for j in slurm.parse_job_ids(text))


@fuzz(100)
@given(st.lists(st.binary(max_size=40) | st.sampled_from([b"SLURM_JOB_ID=\xc2\xb2", b"SLURM_JOB_ID=7",
                                                          b"SLURM_CONF=/etc/slurm.conf", b"SLURMD_NODENAME=n1"]),
                max_size=5).map(b"\0".join))
@example(b"SLURM_JOB_ID=\xc2\xb2\0SLURM_CONF=/etc/slurm.conf")   # found: '²'.isdigit() but int('²') raises
def test_a_jobs_own_environment_cannot_crash_the_proc_scan(tmp_path_factory, environ):
    """A workload sets its own environment; the executor reads it from /proc during a Slurm drain."""
    proc = tmp_path_factory.mktemp("proc")
    (proc / "4242").mkdir()
    (proc / "4242" / "environ").write_bytes(environ)
    (proc / "self").mkdir()
    found = slurm_local.scan("/etc/slurm.conf", "n1", proc=str(proc))
    assert set(found) <= {4242} and all(isinstance(j, int) for j in found.values())


# -- Vector's answer, and the Kubernetes API's objects ------------------------------------------

@fuzz(100)
@given(st.none() | st.text(max_size=12) | st.sampled_from(["²", " 5 ", "1e9", "-1", "99999999999999999999"]))
def test_vector_retry_after(value):
    out = retry_after_s(value)
    assert out is None or 0 <= out <= 300


T0 = 1_800_000_000.0
PODS = [pod("web-0", labels={"app": "web"}, owner=("ReplicaSet", "web"), priority=5, grace=30),
        pod("solo", grace=0), pod("ds", owner=("DaemonSet", "ds")), pod("done", phase="Succeeded")]
PDBS = [pdb("web", {"app": "web"})]


@fuzz(150)
@given(mutated({"pods": PODS, "pdbs": PDBS}, values=st.nothing(), max_changes=6))
def test_drain_plan_with_any_optional_field_missing(doc):
    """Pods and PDBs as the API server may send them: it validates their schema, so a field has
    its type -- but any optional one may be absent. The plan and the schedule work on all of them.
    (The API server is inside the trust boundary -- authenticated TLS, node-bound identity -- so
    values of the wrong type are not in scope; a drain thread that raised would be reported and
    restarted.)"""
    pods, pdbs = doc.get("pods", []), doc.get("pdbs", [])
    pods_that_count(pods)
    book = EvictionBook(phase_ends(T0, T0 + 100, Budget(70, 10, 50, 10)), T0, "report")
    book.observe(pods, pdbs)
    actions, _ = book.next_actions(at(T0 + 20), Inputs(), 8)
    ujson.dumps([a.key for a in actions])
    book.remaining()
