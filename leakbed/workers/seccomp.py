"""The sandbox's system-call filter: what attack code never needs is refused before the kernel acts on it.

One deny-list, two renderings. Locally it is built with libseccomp (the library behind Podman's and
Docker's filters, through ``pyseccomp``'s ctypes binding) and exported as the classic-BPF program
``bwrap --seccomp FD`` loads just before it runs the worker; for containers it is written as an OCI
seccomp profile (``oci_profile``, ``leakbed/deploy/seccomp/attack-worker.json``) that the engine compiles
with the same library. Default allow, then deny: a worker runs PyTorch, scikit-learn and gRPC, whose
needs are broad, while the ways out are few and named below. Calls of another architecture's ABI
(i386 ``int 0x80``, x32) are killed by libseccomp's bad-architecture action.
"""

from __future__ import annotations

import errno
import functools
import os

# Each name is refused with EPERM; why an attack never needs it is beside it.
DENIED: dict[str, str] = {
    # file-system namespaces and their escapes
    **dict.fromkeys(
        ("mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree",
         "mount_setattr"),
        "mounting or re-rooting: the sandbox's view of files is fixed before it starts",
    ),
    **dict.fromkeys(("unshare", "setns"), "new or foreign namespaces (a user namespace would give capabilities back)"),
    **dict.fromkeys(
        ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
        "reading or steering another process",
    ),
    **dict.fromkeys(("keyctl", "add_key", "request_key"), "the kernel keyring (secrets of other processes)"),
    **dict.fromkeys(("bpf", "perf_event_open", "userfaultfd"), "kernel programs, profiling, fault handlers (attack surface)"),
    **dict.fromkeys(("io_uring_setup", "io_uring_enter", "io_uring_register"), "io_uring's operations bypass this filter"),
    **dict.fromkeys(
        ("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
         "acct", "quotactl", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
         "sethostname", "setdomainname", "vhangup", "uselib", "mknod", "mknodat", "name_to_handle_at",
         "open_by_handle_at", "fanotify_init", "lookup_dcookie"),
        "administering the machine: kernel modules, reboot, clocks, devices, raw handles",
    ),
}
# clone(2) flags that make a namespace: refused like unshare(2)
CLONE_NAMESPACES = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}
# socket(2) address families a worker may open: its Unix socket, loopback inside its own network
# namespace, and netlink (which interfaces exist); AF_VSOCK (a virtual machine's channel to its host,
# which no network namespace isolates), AF_PACKET, Bluetooth... are refused
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
_MAX_FAMILY = 45  # AF_MAX on Linux 6.x; anything above is refused too


@functools.cache
def bpf_program() -> bytes:
    """The filter as the BPF bytes ``bwrap --seccomp`` reads; ImportError/OSError where libseccomp is missing."""
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(deny, name)
        except (ValueError, OSError):  # a name this architecture lacks (libseccomp cannot resolve it)
            continue
    for flag in CLONE_NAMESPACES.values():
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # glibc falls back to clone(2), whose flags this filter can read, when clone3(2) is not implemented
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    allowed = set(SOCKET_FAMILIES.values())
    for family in range(_MAX_FAMILY + 1):
        if family not in allowed:
            flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GT, _MAX_FAMILY))
    fd = os.memfd_create("leakbed-seccomp-export", 0)
    with os.fdopen(fd, "w+b") as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


# What bubblewrap itself needs to build a sandbox without privileges (a user namespace, mounts, pivot_root, a host
# name of its own): allowed to a remote attack worker's container, which is a gateway spawning one sandbox per
# lane; every lane's attack code is filtered by the whole deny-list again inside its sandbox (``bpf_program``).
GATEWAY_ALLOWED = {"mount", "umount2", "pivot_root", "unshare", "sethostname"}


def oci_profile(gateway: bool = False) -> dict:
    """The same filter as an OCI runtime seccomp profile (what ``security_opt: seccomp=FILE`` takes); ``gateway``: the
    profile of a container whose process builds bubblewrap sandboxes (``GATEWAY_ALLOWED`` and namespaces allowed)."""
    allowed = set(SOCKET_FAMILIES.values())
    masked = [{"index": 0, "value": f, "valueTwo": f, "op": "SCMP_CMP_MASKED_EQ"} for f in CLONE_NAMESPACES.values()]
    families = [{"index": 0, "value": f, "op": "SCMP_CMP_EQ"} for f in range(_MAX_FAMILY + 1) if f not in allowed]
    denied = sorted(set(DENIED) - GATEWAY_ALLOWED) if gateway else sorted(DENIED)
    deny_clone = [{"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM, "args": [a]} for a in masked]
    clone = [] if gateway else deny_clone
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [
            {"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
            # an OCI rule ANDs its args: one rule per flag or family
            *clone,
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
            *({"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EAFNOSUPPORT, "args": [a]} for a in families),
            {
                "names": ["socket"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EAFNOSUPPORT,
                "args": [{"index": 0, "value": _MAX_FAMILY, "op": "SCMP_CMP_GT"}],
            },
        ],
    }
