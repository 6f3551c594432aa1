"""Agent-socket client -> pod: /proc/PID/cgroup parsing and the checkpoint holds."""
from __future__ import annotations

import os

from executor.workload_map import UNKNOWN, holds, pod_uid_from_cgroup, pod_uid_of_pid

UID = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"


def test_cgroupfs_driver_v1():
    text = ("12:pids:/kubepods/burstable/pod8dbc5577-d0e2-4706-8787-57d52c03ddf2/abc123\n"
            "11:memory:/kubepods/burstable/pod8dbc5577-d0e2-4706-8787-57d52c03ddf2/abc123\n")
    assert pod_uid_from_cgroup(text) == UID


def test_systemd_driver_v2():
    text = ("0::/kubepods.slice/kubepods-burstable.slice/"
            "kubepods-burstable-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/cri-containerd-ffee.scope\n")
    assert pod_uid_from_cgroup(text) == UID


def test_guaranteed_qos_has_no_class_level():
    assert pod_uid_from_cgroup("0::/kubepods/pod8DBC5577-D0E2-4706-8787-57D52C03DDF2/c\n") == UID


def test_a_host_process_is_in_no_pod():
    assert pod_uid_from_cgroup("0::/system.slice/slurmd.service\n") is None
    # a pod-like name outside kubepods is not a pod
    assert pod_uid_from_cgroup(f"0::/user.slice/pod{UID}\n") is None


def test_pid_lookup_reads_the_proc_file(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{UID}/x\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("0::/init.scope\n")
    assert pod_uid_of_pid(42, str(tmp_path)) == UID
    assert pod_uid_of_pid(43, str(tmp_path)) is None
    assert pod_uid_of_pid(44, str(tmp_path)) == UNKNOWN       # gone, or unreadable
    assert pod_uid_of_pid(0, str(tmp_path)) == UNKNOWN        # a peer in another pid namespace


def test_the_real_proc_of_this_test_is_readable():
    assert pod_uid_of_pid(os.getpid()) != UNKNOWN


def test_holds():
    assert holds([("a", False), ("b", True), (None, False)]) == (frozenset({"a"}), False)
    assert holds([(UNKNOWN, False), ("a", True)]) == (frozenset(), True)
    assert holds([(UNKNOWN, True)]) == (frozenset(), False)
