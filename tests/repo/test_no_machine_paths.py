"""No tracked file names an absolute path of one particular machine.

A path such as a developer's venv or home directory works on the machine it was typed on and
nowhere else: a fresh clone fails with FileNotFoundError far from the cause. Tools are found
through the running interpreter (tests.support.procutil.venv_tool), the repository root or a temp dir;
caches through $HOME / $SCO_CACHE. What this test refuses:

- a home or work directory: /root, /home/<user>, /Users/<user>, /work, /workspace, /builds,
  /runner, /srv/<...>/ci, /mnt/<drive>/Users, C:\\Users;
- a venv outside the repository: any absolute path through a ``venv``, ``.venv``, ``virtualenvs``
  or ``site-packages`` directory (a venv under /opt is as machine-bound as one in a home directory).

System paths the agent must know (/proc, /sys, /run, /etc, /usr, /var, /dev, /tmp, /bin, /lib,
/opt/<vendor>) are fine, and so are URL paths (``http://host/home/x``) and paths relative to a
variable (``$REPO/.venv``, ``{base}/work/x``), which is where such a path is rooted elsewhere.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parents[2]

# Where an absolute path may start: not inside a word, a URL, another path or an expansion
# ("$HOME/work", "${REPO}/.venv", "https://x/home/", "a/b/root/c", "~/.cache" are all rooted elsewhere).
_START = r"(?<![\w.\-/~$}%@\\])"
_MACHINE_ROOTS = r"(?:root|home|Users|work|workspace|builds|runner|mnt/[a-z]/Users)"
_SEGMENT_END = r"(?![\w.\-])"
MACHINE_PATH = re.compile(
    _START + r"(?:"
    + r"/" + _MACHINE_ROOTS + _SEGMENT_END                                   # root or home directories
    + r"|/(?:[\w.\-]+/)*(?:\.?venvs?|virtualenvs|site-packages)" + _SEGMENT_END  # /opt/venv/bin/x
    + r"|[A-Za-z]:\\+Users\\"                                                 # C:\Users\alice
    + r")"
)


def machine_paths(text: str) -> list[str]:
    """The machine-specific absolute paths named in ``text`` (each with the rest of its token)."""
    return [text[m.start():].split(maxsplit=1)[0][:80] for m in MACHINE_PATH.finditer(text)]


# -- the matcher itself: it must catch what it is for, and leave what is fine ---------------------

# Written with {R} for the root slash, so that this file itself names no machine's path; the test
# puts the slash back.
@pytest.mark.parametrize("text", [
    'KUBECTL = "{R}work/venv/bin/kubectl"',
    "Facts: {R}work/shared/research/slurm.md.",
    "cache = '{R}root/.cache/sco-agent'",
    "{R}home/alice/src/sco-agent/tests",
    "see {R}Users/bob/sco-agent",
    "{R}workspace/sco-agent/.venv/bin/python",
    "cd {R}builds/group/sco-agent && make",
    "{R}runner/_work/sco-agent",
    "{R}opt/venv/bin/kubectl",
    "{R}usr/local/lib/python3.11/site-packages/zmq",
    "{R}srv/ci/.venv/bin/ruff check .",
    "PATH={R}x/y:{R}work/main/.venv/bin",
    "({R}root)",
    "ls {R}root",
    "C:\\Users\\alice\\sco",
])
def test_matcher_finds_a_machine_path(text: str) -> None:
    text = text.replace("{R}", "/")
    assert machine_paths(text), text


@pytest.mark.parametrize("text", [
    "/proc/self/status", "/sys/fs/cgroup/cpu.max", "/run/sco-agent/ipc", "/etc/sco-agent/agent.toml",
    "/usr/lib/go-1.19/bin", "/var/lib/sco-agent/spool.ring", "/dev/null", "/tmp/kube-real-build.X",
    "/bin/sh", "/lib/systemd/system", "/opt/sco-agent/bin",
    "https://example.com/home/user/x", "http://127.0.0.1:8080/work/items", "git@host:root/repo",
    "$HOME/.cache/sco-agent", "${HOME}/.cache", "~/.cache/sco-agent", "$REPO/.venv/bin/python",
    "${VENV}/bin/pip", "{base}/work/x", "tests/rigs/work/x", "a/home/b", "api/v1/root/x",
    "/homework", "/rooted", "/workload/x", "/working", "/api/v1/namespaces/home", "mount --root",
    "SCO_VENV", "python3 -m venv .venv", "the venv's own kubectl", "%APPDATA%/x",
])
def test_matcher_leaves_system_and_relative_paths(text: str) -> None:
    assert machine_paths(text) == [], text


# -- the scan ------------------------------------------------------------------------------------------

def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False, timeout=60)
    assert listed.returncode == 0, f"git ls-files failed (the suite runs from a clone): {listed.stderr!r}"
    files = [REPO / name for name in listed.stdout.decode().split("\0") if name]
    assert len(files) > 100, f"only {len(files)} tracked files listed"
    return files


def test_no_tracked_file_names_a_path_of_one_machine() -> None:
    found = []
    for path in tracked_text_files():
        # This file alone is skipped: it spells out the paths it refuses (docstring, pattern, examples).
        if path == THIS_FILE or not path.is_file():     # not a file: deleted, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:   # a binary file: its bytes are not paths anyone typed
            continue
        text = data.decode("utf-8", "replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{lineno}: {hit}" for hit in machine_paths(line)]
    assert not found, ("absolute paths of one machine (find tools via tests.support.procutil.venv_tool, "
                       "the repo root or a temp dir):\n" + "\n".join(found))
