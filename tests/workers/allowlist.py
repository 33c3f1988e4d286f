"""What a sandbox sees of the host, listed from inside and compared with the allowlist trusted code built for it
(``Sandbox.allowlist``): shared by the sandbox's tests and the red team's."""

from __future__ import annotations

import os

from leakbed.workers import sandbox

# run inside: every mount (from its own mountinfo) and the files of its root tmpfs outside them
SEE = r"""
import json, os
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    sep = f.index("-")
    mounts.append({"dev": f[2], "root": f[3], "point": f[4], "fstype": f[sep + 1]})
points = {m["point"] for m in mounts}
skeleton = []
for top, dirs, names in os.walk("/", followlinks=False):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in points]
    for name in [*dirs, *names]:
        path = os.path.join(top, name)
        if path not in points:
            skeleton.append([path, "link" if os.path.islink(path) else "dir" if os.path.isdir(path) else "file"])
print(json.dumps({"mounts": mounts, "skeleton": skeleton, "uid": os.getuid()}))
"""
# run by the spawning user (root, or an ordinary user): builds a sandbox over a store, runs SEE in it, and says what
# it meant to mount (the allowlist) and what its own mount namespace holds (to find each host path's filesystem)
DRIVER = r"""
import json, subprocess, sys
from pathlib import Path
from leakbed.workers.lane import INPUTS
from leakbed.workers.sandbox import Limits, Mount, Sandbox
box = Sandbox(Limits(), [Mount(Path(sys.argv[1]), INPUTS)])
proc = box.popen([sys.executable, "-c", sys.stdin.read()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
out, err = proc.communicate(timeout=120)
assert proc.returncode == 0, err.decode()[-2000:]
allow = {str(inside): str(host) for inside, host in box.allowlist().items()}
host = open("/proc/self/mountinfo").read()
print(json.dumps({"seen": json.loads(out), "allow": allow, "host": host, "staged": [s.name for s in box.staged()]}))
"""
OWN_TMPFS = {"/dev", "/dev/shm", "/tmp", "/leakbed/out"}


def fs_of(path: str, host_mountinfo: str) -> tuple[str, str]:
    """(device, path within that filesystem) of a host path, as a bind mount of it shows in a mountinfo."""
    real = os.path.realpath(path)
    best = ("", "", "")
    for line in host_mountinfo.splitlines():
        f = line.split()
        point = f[4]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[2]):
            best = (f[2], f[3], point)
    dev, root, point = best
    return dev, os.path.normpath(os.path.join(root, os.path.relpath(real, point)))


def check_allowlist(found: dict) -> list[str]:
    """Every mount a sandbox holds is one of: its own /proc, its own tmpfs folders (root, /dev, /tmp, /dev/shm,
    /leakbed/out; /etc/passwd and /etc/group are files of its root), a device node of its minimal /dev, or a folder
    of its allowlist bound from exactly that host folder; the rest of its root holds folders and the /bin-like links
    only. What breaks that, one line each."""
    seen, allow = found["seen"], found["allow"]
    root_dev = next(m["dev"] for m in seen["mounts"] if m["point"] == "/")
    wrong = []
    for m in seen["mounts"]:
        point = m["point"]
        if m["fstype"] == "proc" and (point == "/proc" or point.startswith("/proc/")):
            continue
        own_root = m["dev"] == root_dev and point in ("/", "/etc/passwd", "/etc/group")
        if m["fstype"] == "tmpfs" and (point in OWN_TMPFS or own_root):
            continue
        if m["fstype"] == "devtmpfs" and point in {f"/dev/{d}" for d in sandbox.DEVICES} and m["root"] == point[4:]:
            continue
        if point in allow and (m["dev"], m["root"]) == fs_of(allow[point], found["host"]):
            continue
        wrong.append(f"{point}: {m['fstype']} {m['dev']} {m['root']} is not in the allowlist")
    missing = set(allow) - {m["point"] for m in seen["mounts"]}
    wrong += [f"{p}: in the allowlist, not mounted" for p in sorted(missing)]
    links = {f"/{top}" for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")} | {"/dev/fd"}
    wrong += [f"{path}: a {kind} of its root" for path, kind in seen["skeleton"]
              if not (kind == "dir" or (kind == "link" and path in links))]  # fmt: skip
    return wrong
