"""Red team, part two: attack code that tries to break out of its sandbox, not only to look around.

Run where attack code runs (``leakbed sandbox-run --store DIR -- python -m attacks.breakout ...``,
or inside an attack-worker container), it tries one way out per probe and reports, as JSON, whether
the boundary held. It is given from outside what a determined attacker would know or guess about
the host: the TCP ports listening there, its abstract Unix sockets, some of its process ids, host
addresses, services by name, and the path of a truth file. Standard library only (``ctypes`` for
the raw system calls), so that it runs in any image. Threat model: the attacker is the code itself.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path

# x86_64 system call numbers (raw calls, so that no wrapper hides what the kernel said)
SYS = {"ptrace": 101, "init_module": 175, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "setns": 308, "bpf": 321}
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
OFF_MACHINE = [("1.1.1.1", 53), ("8.8.8.8", 53), ("9.9.9.9", 443), ("151.101.0.223", 443), ("2606:4700:4700::1111", 53)]
_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: int) -> tuple[int, str]:
    """A raw system call: (result, errno name)."""
    ctypes.set_errno(0)
    res = _libc.syscall(SYS[name], *[ctypes.c_long(a) for a in args])
    err = ctypes.get_errno()
    return res, errno.errorcode.get(err, str(err)) if res == -1 else "ok"


def _status() -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)


def capabilities(_: argparse.Namespace) -> tuple[bool, str]:
    s = _status()
    sets = {k: s.get(k, "").strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    return all(int(v or "1", 16) == 0 for v in sets.values()), json.dumps(sets)


def no_new_privs(_: argparse.Namespace) -> tuple[bool, str]:
    value = _status().get("NoNewPrivs", "?").strip()
    return value == "1", f"NoNewPrivs {value}"


def root_user(_: argparse.Namespace) -> tuple[bool, str]:
    tries = []
    for fn, arg in ((os.setuid, 0), (os.setgid, 0)):
        try:
            fn(arg)
            tries.append(f"{fn.__name__}(0) worked")
        except OSError as err:
            tries.append(f"{fn.__name__}(0): {errno.errorcode[err.errno]}")
    uid, euid = os.getuid(), os.geteuid()
    return uid != 0 and euid != 0 and all("worked" not in t for t in tries), f"uid {uid} euid {euid}; {'; '.join(tries)}"


def chroot_escape(args: argparse.Namespace) -> tuple[bool, str]:
    """The classic: keep a descriptor on /, chroot into a subfolder, fchdir back, climb, chroot('.')."""
    work = Path(args.scratch) / "chroot-escape"
    work.mkdir(parents=True, exist_ok=True)
    keep = os.open("/", os.O_RDONLY)
    try:
        os.chroot(str(work))
    except OSError as err:
        os.close(keep)
        return True, f"chroot refused: {errno.errorcode[err.errno]}"
    os.fchdir(keep)
    for _ in range(64):
        os.chdir("..")
    try:
        os.chroot(".")
    except OSError as err:
        return True, f"second chroot refused: {errno.errorcode[err.errno]}"
    leaked = [p for p in args.secret if os.path.exists(p)]
    return not leaked, f"climbed out; host paths now visible: {leaked}"


def mount(args: argparse.Namespace) -> tuple[bool, str]:
    target = Path(args.scratch) / "mnt"
    target.mkdir(parents=True, exist_ok=True)
    ctypes.set_errno(0)
    plain = _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", 0, None)
    plain_err = errno.errorcode.get(ctypes.get_errno(), "?")
    res, err = _call("unshare", CLONE_NEWUSER | CLONE_NEWNS)
    nested = "unshare refused" if res == -1 else "unshare worked"
    if res == 0:  # a user namespace of its own: root there, try to mount in it
        inner = _libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", 0, None)
        nested += "; mount in it " + ("worked" if inner == 0 else "refused")
    return plain != 0 and res == -1, f"mount tmpfs: {plain_err}; {nested} ({err})"


def block_devices(args: argparse.Namespace) -> tuple[bool, str]:
    found, readable = [], []
    for folder in ("/dev", "/dev/block", "/dev/mapper", "/dev/disk/by-id"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if stat.S_ISBLK(os.stat(path).st_mode):
                    found.append(path)
                    with open(path, "rb") as f:
                        f.read(512)
                    readable.append(path)
            except OSError:
                continue
    try:
        os.mknod(str(Path(args.scratch) / "sda"), stat.S_IFBLK | 0o600, os.makedev(8, 0))
        made = "mknod of a block device worked"
    except OSError as err:
        made = f"mknod: {errno.errorcode[err.errno]}"
    return not readable and "worked" not in made, f"block devices seen {found[:8]}, readable {readable[:8]}; {made}"


def proc_sys(_: argparse.Namespace) -> tuple[bool, str]:
    opened = []
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches",
                 "/proc/sys/kernel/hostname", "/sys/kernel/uevent_helper"):
        try:
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)
            opened.append(path)
        except OSError:
            continue
    return not opened, f"opened for writing: {opened}"


def _connects(family: int, address: object, timeout: float = 1.5) -> bool:
    """Whether something listening at ``address`` accepted: a socket that connected to itself (TCP's
    simultaneous open, when the port tried is the ephemeral port the kernel picked) reached nothing."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(address)
            return family == socket.AF_UNIX or s.getsockname() != s.getpeername()
    except OSError:
        return False


def host_ports(args: argparse.Namespace) -> tuple[bool, str]:
    """The given ports (or, with --all-ports, every port) on loopback and the host's addresses. Its own
    ports (the worker's in a container) do not count."""
    hosts = ["127.0.0.1", "::1", *args.host_address]
    ports = range(1, 65536) if args.all_ports else args.port
    reached = []
    for port in ports:
        if port in args.own_port:
            continue
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            if _connects(family, (host, port), 0.5):
                reached.append(f"{host}:{port}")
    return not reached, f"tried {len(ports)} ports on {hosts}; reached {reached[:20]}"


def services(args: argparse.Namespace) -> tuple[bool, str]:
    """Other services by name (a compose deployment): none may answer."""
    reached = []
    for item in args.service:
        host, port = item.rsplit(":", 1)
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError:
            continue
        if any(_connects(fam, addr, 1.0) for fam, _, _, _, addr in infos):
            reached.append(item)
    return not reached, f"tried {args.service}; reached {reached}"


def abstract_sockets(args: argparse.Namespace) -> tuple[bool, str]:
    reached = [name for name in args.abstract if _connects(socket.AF_UNIX, "\0" + name.lstrip("@"), 0.5)]
    return not reached, f"tried {len(args.abstract)} abstract sockets; reached {reached}"


def off_machine(_: argparse.Namespace) -> tuple[bool, str]:
    reached = [f"{h}:{p}" for h, p in OFF_MACHINE if _connects(socket.AF_INET6 if ":" in h else socket.AF_INET, (h, p), 2.0)]
    try:
        resolved = socket.gethostbyname("pypi.org")
    except OSError:
        resolved = ""
    try:  # a virtual machine's channel to its host, which no network namespace covers
        with socket.socket(40, socket.SOCK_STREAM) as v:  # AF_VSOCK
            v.settimeout(1.0)
            v.connect((2, 22))
            vsock = "vsock connect to the host (CID 2) worked"
    except OSError as err:
        vsock = f"vsock: {errno.errorcode.get(err.errno, err)}"
    ifaces = [name for _, name in socket.if_nameindex()]
    held = not reached and not resolved and "worked" not in vsock
    return held, f"reached {reached}; pypi.org resolved to {resolved or 'nothing'}; {vsock}; interfaces {ifaces}"


PRIVATE_MARKER = ".leakbed-breakout-private"  # written to its own /tmp: the host's /tmp must not show it


def write_outside(args: argparse.Namespace) -> tuple[bool, str]:
    (Path(args.scratch) / PRIVATE_MARKER).write_text("x")
    written = []
    for folder in ["/", "/usr", "/etc", "/proc", "/dev", sys.prefix, *args.outside]:
        path = os.path.join(folder, ".leakbed-breakout")
        try:
            with open(path, "w") as f:
                f.write("x")
            written.append(path)
        except OSError:
            continue
    (Path(args.store) / ".leakbed-breakout").write_text("x")  # the store is the one place it may write
    return not written, f"written outside the store: {written}"


def processes(args: argparse.Namespace) -> tuple[bool, str]:
    visible = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    signalled = []
    for pid in args.pid:
        if pid in visible:  # a number its own namespace uses (its init, itself): not the host's process
            continue
        try:
            os.kill(pid, 0)
            signalled.append(pid)
        except ProcessLookupError:
            continue
        except PermissionError:
            signalled.append(pid)  # it exists in this namespace: seen, if not signalled
    ptrace = _call("ptrace", 16, 1, 0, 0)  # PTRACE_ATTACH to PID 1 of its namespace
    held = not signalled and ptrace[0] == -1 and len(visible) <= args.max_own_processes
    return held, f"visible pids {visible[:20]}; host pids reachable {signalled}; ptrace attach: {ptrace[1]}"


def kernel_interfaces(_: argparse.Namespace) -> tuple[bool, str]:
    tries = {
        "keyctl": _call("keyctl", 0, -3, 0, 0),  # KEYCTL_GET_KEYRING_ID of the user keyring
        "bpf": _call("bpf", 0, 0, 0),
        "perf_event_open": _call("perf_event_open", 0, 0, -1, -1, 0),
        "setns": _call("setns", 0, 0),
        "init_module": _call("init_module", 0, 0, 0),
        "unshare(net)": _call("unshare", CLONE_NEWNET),
    }
    held = all(res == -1 for res, _ in tries.values())
    return held, ", ".join(f"{k}: {e}" for k, (_, e) in tries.items())


def secret_files(args: argparse.Namespace) -> tuple[bool, str]:
    seen = [p for p in args.secret if os.path.exists(p)]
    return not seen, f"truth paths visible: {seen}"


PROBES: dict[str, Callable[[argparse.Namespace], tuple[bool, str]]] = {
    "capabilities": capabilities,
    "no-new-privs": no_new_privs,
    "root-user": root_user,
    "chroot-escape": chroot_escape,
    "mount": mount,
    "block-devices": block_devices,
    "proc-sys-write": proc_sys,
    "host-tcp-ports": host_ports,
    "services": services,
    "abstract-sockets": abstract_sockets,
    "off-machine": off_machine,
    "write-outside-store": write_outside,
    "other-processes": processes,
    "kernel-interfaces": kernel_interfaces,
    "truth-file": secret_files,
}


# What the in-run red team (leakbed/attacks/redteam.py) tries from inside a real worker: probes that only look and
# connect, harmless to the host even in a run with the sandbox switched off (the others mount, chroot,
# unshare or write outside the store: for `leakbed sandbox-run` and containers only)
HARMLESS = ("capabilities", "no-new-privs", "block-devices", "proc-sys-write", "host-tcp-ports", "off-machine", "other-processes")


def run(args: argparse.Namespace, names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Every probe (or those named), each in isolation: a probe that crashes counts as one that did not hold."""
    out = {}
    for name, probe in PROBES.items():
        if names is not None and name not in names:
            continue
        try:
            held, detail = probe(args)
        except Exception as err:  # noqa: BLE001 - a probe's own failure is reported, not hidden
            held, detail = False, f"probe raised {type(err).__name__}: {err}"
        out[name] = {"held": bool(held), "detail": detail}
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leakbed.attacks.breakout", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, action="append", default=[], help="a TCP port listening on the host")
    p.add_argument("--all-ports", action="store_true", help="try every TCP port, 1 to 65535")
    p.add_argument("--own-port", type=int, action="append", default=[], help="a port of its own (not counted)")
    p.add_argument("--host-address", action="append", default=[], help="an address of the host")
    p.add_argument("--service", action="append", default=[], help="NAME:PORT of another service")
    p.add_argument("--abstract", action="append", default=[], help="an abstract Unix socket of the host (@name)")
    p.add_argument("--pid", type=int, action="append", default=[], help="a host pid (skipped if its own namespace uses it)")
    p.add_argument("--secret", action="append", default=[], help="a host path that must stay unseen (the truth)")
    p.add_argument("--outside", action="append", default=[], help="a host folder it must not write")
    p.add_argument("--scratch", default="/tmp", help="a folder it may write for its own use")
    p.add_argument("--store", default=".", help="its store folder (written once, as it may)")
    p.add_argument("--max-own-processes", type=int, default=4, help="most processes its own namespace may show")
    p.add_argument("--only", action="append", choices=sorted(PROBES), help="run only these probes (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print(json.dumps(run(args, tuple(args.only) if args.only else None), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
