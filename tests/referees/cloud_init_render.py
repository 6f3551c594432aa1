"""Render a cloud-config's write_files into a directory with cloud-init's own code; print what it did.

Run by tests/referees/test_cloud_init.py with cloud-init's interpreter (the one its
``cloud-init`` script names), never the agent's: it imports only cloud-init.

    python3 cloud_init_render.py USER_DATA ROOT  ->  JSON list on stdout

Every entry is written by ``cloudinit.config.cc_write_files.write_files`` -- the function the
write_files module runs at boot, so content, encoding (b64, gzip) and permissions are decoded
exactly as on a node -- with two changes a test needs: the path is moved under ROOT, and the
owner is recorded rather than applied (a test need not run as root), the file being owned by
whoever runs this.
"""
from __future__ import annotations

import json
import os
import pwd
import sys

from cloudinit import util
from cloudinit.config import cc_write_files


def main(user_data: str, root: str) -> int:
    with open(user_data, encoding="utf-8") as f:
        cfg = util.load_yaml(f.read())
    me = pwd.getpwuid(os.getuid()).pw_name
    done = []
    for entry in cfg.get("write_files") or []:
        moved = dict(entry, path=os.path.join(root, entry["path"].lstrip("/")), owner=me)
        cc_write_files.write_files("write_files", [moved], me)
        done.append({"path": entry["path"], "owner": entry.get("owner", "root:root"),
                     "permissions": entry.get("permissions"), "encoding": entry.get("encoding"),
                     "defer": bool(entry.get("defer", False))})
    json.dump(done, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
