"""The sandbox untrusted code runs in (``workers.sandbox``): what a sandboxed process sees and is (exactly its
allowlist of mounts, as root and as an ordinary user), its uid (its own, as root), its isolation from other
sandboxes, its quota and limits, its death with its spawner, and ``leakbed sandbox-run``. The red team's break-out
probes are in ``tests/redteam``; the lanes built on this sandbox in ``test_lane.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakbed.cli import main as leakbed_main
from leakbed.core.processes import alive, descendants
from leakbed.workers import sandbox, uids
from leakbed.workers.lane import INPUTS
from leakbed.workers.sandbox import LIB, OUTPUT, Limits, Mount, Sandbox
from tests.workers.allowlist import DRIVER, SEE, check_allowlist, fs_of
from tests.workers.ordinary import ordinary

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(sandbox.available() != "", reason=f"no sandbox here: {sandbox.available()}")

# what a process finds when it looks around: run inside the sandbox, or (the control) outside it
LOOK = r"""
import errno, importlib.util, json, os, sys
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as err:
        return errno.errorcode[err.errno]
def write(path, size=1):
    try:
        with open(path, "wb") as f:
            f.write(b"x" * size)
        return "ok"
    except OSError as err:
        return errno.errorcode[err.errno]
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as err:
        return errno.errorcode[err.errno]
status = dict(l.split(":", 1) for l in read("/proc/self/status").splitlines() if ":" in l)
procs = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
secret = sys.stdin.readline().strip()  # not in argv: the checks below look at argv
probe = sys.stdin.readline().strip() == "probe-writes"  # only in the sandbox: outside, the writes would land
out = {
    "leakbed": listing("/leakbed"),
    "lib": sorted(listing("/leakbed/lib"), key=lambda n: n != "leakbed"),
    "inputs": listing("/leakbed/inputs"),
    "secret_exists": os.path.exists(secret),
    "secret_parent": listing(os.path.dirname(secret)),
    "procs": procs,
    "pid": os.getpid(),
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "env": dict(os.environ),
    "cmdlines": {str(p): read(f"/proc/{p}/cmdline") for p in procs},
    "status": {k: status[k].strip() for k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                              "NoNewPrivs", "Seccomp") if k in status},
    "groups": os.getgroups(),
    "referee": importlib.util.find_spec("leakbed.referee") is not None,
    "attacks": importlib.util.find_spec("leakbed.attacks") is not None,
}
if probe:
    out |= {
        "write_inputs": write("/leakbed/inputs/new"),
        "overwrite_input": write("/leakbed/inputs/prior.txt"),
        "write_out": write("/leakbed/out/made"),
        "write_root": write("/made"),
        "write_code": write(os.path.join(os.path.dirname(importlib.util.find_spec("leakbed.workers").origin), "made")),
        "write_tmp": write("/tmp/made"),
    }
print(json.dumps(out))
"""


def _run(argv: list[str], limits: Limits | None = None, mounts: list[Mount] | None = None,
         stdin: str = "") -> subprocess.CompletedProcess:
    proc = Sandbox(limits or Limits(), mounts or []).popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                           stderr=subprocess.PIPE)
    out, err = proc.communicate(stdin.encode(), timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(), err.decode())


@pytest.fixture
def run_dir(tmp_path: Path) -> dict[str, Path]:
    """A run's folder as the trusted side lays it out: the referee's truth beside the attack store."""
    run = tmp_path / "run-seed-7"
    secret = run / "referee" / "random" / "truth.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"update_id": "a", "user_id": "alice"}\n')
    (run / "config.toml").write_text("seed = 7\n")
    store = run / "attack-store" / "r"
    store.mkdir(parents=True)
    (store / "prior.txt").write_text("prior")
    return {"run": run, "secret": secret, "store": store}


def test_available_here():
    assert sandbox.available() == ""


@pytest.fixture
def seen(run_dir: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("LEAKBED_SECRET_SEED", "7")
    done = _run([sys.executable, "-c", LOOK], mounts=[Mount(run_dir["store"], INPUTS)],
                stdin=f"{run_dir['secret']}\nprobe-writes\n")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_it_sees_its_inputs_read_only_and_its_output_folder_and_nothing_of_the_run(seen: dict, run_dir):
    assert seen["leakbed"] == ["inputs", "lib", "out"] and seen["inputs"] == ["prior.txt"]
    assert seen["lib"][0] == "leakbed" and all(not p.startswith(".") for p in seen["lib"])  # staged code only
    assert seen["secret_exists"] is False and seen["secret_parent"] == "ENOENT"  # the run's folder is not there
    assert seen["write_inputs"] == "EROFS" and seen["overwrite_input"] == "EROFS"  # the inputs: read-only
    assert seen["write_root"] == "EROFS" and seen["write_code"] == "EROFS"  # its root, leakbed's code: read-only
    assert seen["write_out"] == "ok" and seen["write_tmp"] == "ok"  # its own tmpfs folders only
    assert seen["cwd"] == str(OUTPUT)
    assert (run_dir["store"] / "prior.txt").read_text() == "prior" and sorted(os.listdir(run_dir["store"])) == ["prior.txt"]


def test_no_host_path_of_the_run_reaches_it_and_no_bwrap_is_visible(seen: dict, run_dir):
    """argv, environment, every command line under its /proc and its working directory: no path of the run; it is
    pid 1 of its own PID namespace (``--as-pid-1``), so neither bwrap nor any other process is visible."""
    run = str(run_dir["run"])
    words = json.dumps({k: seen[k] for k in ("argv", "env", "cmdlines", "cwd")})
    assert run not in words and str(run_dir["store"]) not in words and "run-seed-7" not in words
    assert seen["procs"] == [1] and seen["pid"] == 1
    assert "bwrap" not in words and "prlimit" not in words and "setpriv" not in words
    assert "LEAKBED_SECRET_SEED" not in seen["env"] and seen["env"]["HOME"] == "/tmp"


@pytest.mark.xfail(strict=True, reason="known leak: /proc/self/mountinfo names each bind mount's source path on the "
                   "host (the store's folder under the run), which no bwrap argument hides")
def test_the_mount_table_names_no_host_path_of_the_run(run_dir):
    done = _run(["cat", "/proc/self/mountinfo"], mounts=[Mount(run_dir["store"], INPUTS)])
    assert done.returncode == 0 and "/leakbed/inputs" in done.stdout
    assert str(run_dir["run"]) not in done.stdout


def test_it_is_an_unprivileged_user_without_capabilities_under_a_syscall_filter(seen: dict):
    uid = int(seen["status"]["Uid"].split()[0]) if ROOT else os.getuid()
    gid = uid if ROOT else os.getgid()
    assert uids.in_range(uid) if ROOT else True  # as root: a uid of its own, from the reserved range
    assert seen["status"]["Uid"].split() == [str(uid)] * 4 and seen["status"]["Gid"].split() == [str(gid)] * 4
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(seen["status"][cap], 16) == 0, (cap, seen["status"])
    assert seen["status"]["NoNewPrivs"] == "1" and seen["status"]["Seccomp"] == "2"  # 2: a filter
    assert seen["groups"] in ([], [uid])


def test_attack_code_is_importable_and_the_referee_is_not(seen: dict):
    assert seen["attacks"] is True and seen["referee"] is False


def test_without_the_sandbox_the_same_look_finds_the_run(run_dir):
    """The control, so the checks above can fail: unsandboxed, the same program sees the referee's truth, its parents'
    folders and the secret in its environment."""
    env = {**os.environ, "LEAKBED_SECRET_SEED": "7", "PYTHONPATH": str(sandbox.code_root())}
    done = subprocess.run([sys.executable, "-c", LOOK], input=f"{run_dir['secret']}\nlook only\n", cwd=run_dir["store"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen["secret_exists"] is True and seen["secret_parent"] == ["truth.jsonl"]
    assert "LEAKBED_SECRET_SEED" in seen["env"] and seen["referee"] is True and str(run_dir["run"]) in seen["cwd"]
    assert len(seen["procs"]) > 1 and seen["pid"] != 1 and "write_root" not in seen  # it looked, wrote nothing


@pytest.mark.skipif(not ROOT, reason="the host-side uid of the privileged mode")
def test_the_host_sees_an_unprivileged_process_in_no_user_namespace(tmp_path):
    """As root, bwrap builds the sandbox without a user namespace and setpriv drops to the uid leased for it: seen from
    the host (not only from inside) the process runs as that uid with no capabilities (a user namespace made by root
    would map the sandbox's uid onto host root)."""
    proc = Sandbox(Limits()).popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        until, inner = time.monotonic() + 30, []
        while time.monotonic() < until and not inner:
            inner = [p for p in descendants(proc.pid) if Path(f"/proc/{p}/comm").read_text().startswith("python")]
            time.sleep(0.02)
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{inner[0]}/status").read_text().splitlines())
        uid = proc.lease.uid
        assert uids.in_range(uid) and status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(uid)] * 4
        assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == int(status["CapBnd"], 16) == 0
        assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
        assert Path(f"/proc/{inner[0]}/uid_map").read_text().split()[:2] == ["0", "0"]
    finally:
        proc.kill()
        proc.wait()


def test_its_output_folder_is_under_a_quota(tmp_path):
    """``Limits.output_mb`` bounds /leakbed/out (a tmpfs of that size): writing past it fails with ENOSPC, and what fit
    stays written."""
    code = (
        "import errno, os\n"
        "f = open('/leakbed/out/big', 'wb')\n"
        "written = 0\n"
        "try:\n"
        "    for _ in range(64):\n"
        "        f.write(b'x' * (1 << 20)); f.flush(); written += 1 << 20\n"
        "except OSError as err:\n"
        "    print(errno.errorcode[err.errno], written, os.path.getsize('/leakbed/out/big'))\n"
    )
    done = _run([sys.executable, "-c", code], Limits(output_mb=4))
    says, written, size = done.stdout.split()
    assert done.returncode == 0 and says == "ENOSPC", done.stderr
    assert 2 << 20 <= int(written) <= 4 << 20 and int(size) <= 4 << 20


@pytest.mark.parametrize(
    ("limits", "code", "says"),
    [
        (Limits(memory_mb=512), "x = bytearray(1 << 30)", "MemoryError"),
        (Limits(processes=64),
         "import threading, time\nts = [threading.Thread(target=time.sleep, args=(1,)) for _ in range(200)]\n"
         "[t.start() for t in ts]", "can't start new thread"),
        (Limits(file_size_mb=1), "open('/leakbed/out/big', 'wb').write(b'x' * (2 << 20))", "File too large"),
        (Limits(tmp_mb=16), "open('/tmp/big', 'wb').write(b'x' * (32 << 20))", "No space left on device"),
    ],
    ids=["memory", "processes", "file-size", "tmp-size"],
)
def test_a_sandboxed_process_cannot_go_over_its_limits(limits, code, says):
    done = _run([sys.executable, "-c", code], limits)
    assert done.returncode != 0 and says in done.stderr, done.stderr[-500:]


def test_within_its_limits_the_same_work_succeeds():
    """The control: the limits above are what failed, not the work."""
    code = (
        "import threading, time\nx = bytearray(1 << 30)\nopen('/leakbed/out/big', 'wb').write(b'x' * (2 << 20))\n"
        "open('/tmp/big', 'wb').write(b'x' * (32 << 20))\n"
        "ts = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(200)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]"
    )
    done = _run([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr[-500:]


def test_it_dies_with_its_spawner():
    """A spawner killed without ending its sandbox takes it with it: bwrap by its parent-death signal, the command (as
    root: another uid, which that signal does not reach) by its guard. The spawner is killed once the command itself
    runs (it said so): killed while bwrap still set up, before the drop to the sandbox's uid, the sandbox died with it
    even without a guard, as a measured CI run saw."""
    spawner = (
        "import subprocess, sys, time\n"
        "from leakbed.workers.sandbox import Limits, Sandbox\n"
        "code = 'import time; print(\"ready\", flush=True); time.sleep(120)'\n"
        "p = Sandbox(Limits()).popen([sys.executable, '-c', code], stdout=subprocess.PIPE)\n"
        "assert p.stdout.readline() == b'ready\\n'\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(sandbox.code_root())})
    try:
        bwrap = int(parent.stdout.readline())
        inner = descendants(bwrap)
        assert inner, "the sandboxed process did not start"
    finally:
        parent.kill()
        parent.wait(timeout=10)
    until = time.monotonic() + 3
    while any(alive(p) for p in [bwrap, *inner]) and time.monotonic() < until:
        time.sleep(0.05)
    left = {"bwrap": alive(bwrap), "command": any(alive(p) for p in inner)}
    for pid in [bwrap, *inner]:  # the test's own leftovers
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not any(left.values()), f"outlived its spawner: {left}"


def test_end_kills_everything_in_the_sandbox_at_once():
    """``end`` (what a lane's kill, a deadline and the scoring and check sandboxes use): the sandbox's command, its
    children and bwrap are gone within seconds, though bwrap's own death would not reach them."""
    code = ("import subprocess, sys, time\n"
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']) for _ in range(2)]\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")
    proc = Sandbox(Limits()).popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    inside = descendants(proc.pid)
    assert len(inside) == 3  # its pid 1 and two children
    t0 = time.monotonic()
    sandbox.end(proc)
    until = time.monotonic() + 5
    while any(alive(p) for p in inside) and time.monotonic() < until:
        time.sleep(0.02)
    took = time.monotonic() - t0
    assert proc.returncode is not None and not any(alive(p) for p in inside), inside
    assert took < 5, took
    sandbox.end(proc)  # ending an ended sandbox is nothing


def test_a_mount_outside_leakbed_or_onto_its_output_is_refused(tmp_path):
    for inside in (Path("/etc/x"), OUTPUT, OUTPUT / "x", Path("/leakbedx"), LIB, LIB / "leakbed"):
        with pytest.raises(ValueError, match="must lie under /leakbed, outside /leakbed/out and /leakbed/lib"):
            Sandbox(Limits(), [Mount(tmp_path, inside)])


def test_limits_for_follows_the_workers_setting(monkeypatch):
    from leakbed.core.config import WorkersConfig

    assert sandbox.limits_for(WorkersConfig(sandbox="off")) == (None, "workers.sandbox = 'off'")
    lim, why = sandbox.limits_for(WorkersConfig(sandbox="on"))
    assert why == "" and isinstance(lim, Limits) and lim.memory_mb == WorkersConfig().limits.memory
    monkeypatch.setattr(sandbox, "available", lambda: "bwrap not found")
    assert sandbox.limits_for(WorkersConfig(sandbox="auto")) == (None, "bwrap not found")
    with pytest.raises(ValueError, match="workers.sandbox = 'on' but the attack sandbox cannot start here: bwrap not found"):
        sandbox.limits_for(WorkersConfig(sandbox="on"))


def test_sandbox_run_passes_exit_code_and_output_through(tmp_path, capfd):
    (tmp_path / "prior.txt").write_text("prior")
    tmp_path.chmod(0o755)  # the sandbox user reads it, as it reads a store the pool wrote
    code = ("import os, sys; print('out', os.getuid(), os.getpid(), os.getcwd(), sorted(os.listdir('/leakbed/inputs')));"
            " print('err', file=sys.stderr); open('made', 'w').write('x'); sys.exit(7)")
    assert leakbed_main(["sandbox-run", "--store", str(tmp_path), "--", sys.executable, "-c", code]) == 7
    out, err = capfd.readouterr()
    said, uid, rest = out.strip().split(" ", 2)
    assert said == "out" and (uids.in_range(int(uid)) if ROOT else int(uid) == os.getuid())
    assert rest == "1 /leakbed/out ['prior.txt']" and err.strip() == "err"
    assert sorted(os.listdir(tmp_path)) == ["prior.txt"]  # it wrote into its own tmpfs, nothing on the host


@pytest.mark.parametrize("case", ["missing", "not-a-folder", "no-command", "bad-memory"])
def test_sandbox_run_refuses_bad_input_in_one_line(tmp_path, capfd, case):
    (tmp_path / "file").write_text("keep")
    store = {"missing": tmp_path / "nope", "not-a-folder": tmp_path / "file"}.get(case, tmp_path)
    command = [] if case == "no-command" else ["--", "sh", "-c", "touch /tmp/x"]
    extra = ["--memory-mb", "1"] if case == "bad-memory" else []
    assert leakbed_main(["sandbox-run", "--store", str(store), *extra, *command]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("leakbed: error:"), err
    says = {"missing": "no such folder", "not-a-folder": "no such folder", "no-command": "no command",
            "bad-memory": "--memory-mb must be"}[case]
    assert says in err
    assert (tmp_path / "file").read_text() == "keep" and not (tmp_path / "nope").exists()


def test_a_store_its_caller_cannot_read_is_refused(tmp_path, monkeypatch):
    """Root reads anything, so the refusal is shown by the permission check itself."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ValueError, match="not readable"):
        sandbox.check_store(tmp_path)
    with pytest.raises(ValueError, match="no such folder"):
        sandbox.check_store(tmp_path / "missing")



# --- what it sees of the host: its allowlist, and nothing else ------------------------------------------------------

def test_what_it_sees_of_the_host_is_exactly_its_allowlist(run_dir, tmp_path):
    """Listed from inside: its mounts and its root's own files, compared with the allowlist trusted code built (the
    OS's /usr, the Python environment, leakbed's and the plugins' staged copies, the inputs). The host's root, the
    run folder, the working directory and the checkout are not among them."""
    done = subprocess.run([sys.executable, "-c", DRIVER, str(run_dir["store"])], input=SEE, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "LEAKBED_CACHE": str(tmp_path / "cache")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert check_allowlist(found) == []
    allow = found["allow"]
    assert allow["/leakbed/inputs"] == str(run_dir["store"]) and allow["/leakbed/lib/leakbed"].startswith(str(tmp_path / "cache"))
    hosts = set(allow.values())
    for never in ("/", str(run_dir["run"]), str(tmp_path), os.getcwd(), str(sandbox.code_root())):
        assert never not in hosts, never
    assert not any(str(sandbox.code_root() / "leakbed") in h for h in hosts)  # leakbed's code: its staged copy
    assert found["seen"]["uid"] != 0


def test_what_it_sees_of_the_host_is_exactly_its_allowlist_as_an_ordinary_user(tmp_path_factory):
    user = ordinary(tmp_path_factory.mktemp("ordinary"))
    store = user.folder("store")
    (store / "prior.txt").write_text("prior")
    user.give(store)
    done = user.run([sys.executable, "-c", DRIVER, str(store)], cwd=user.home, timeout=300, stdin=SEE)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert check_allowlist(found) == []
    assert found["seen"]["uid"] == user.uid and found["allow"]["/leakbed/inputs"] == str(store)
    assert "/" not in found["allow"].values() and str(user.home) not in found["allow"].values()


def test_a_check_of_the_allowlist_can_fail(run_dir, tmp_path):
    """The control: a sandbox given one more mount than its allowlist says (the host's root, as a link planted in an
    editable plugin's folder once mounted) is caught."""
    done = subprocess.run([sys.executable, "-c", DRIVER, str(run_dir["store"])], input=SEE, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "LEAKBED_CACHE": str(tmp_path / "cache")})  # fmt: skip
    found = json.loads(done.stdout)
    host_root = fs_of("/", found["host"])
    found["seen"]["mounts"].append({"dev": host_root[0], "root": host_root[1], "point": "/src/plugin", "fstype": "ext4"})
    found["seen"]["skeleton"].append(["/leakbed/secret.txt", "file"])
    assert check_allowlist(found) == ["/src/plugin: ext4 " + " ".join(host_root) + " is not in the allowlist",
                                      "/leakbed/secret.txt: a file of its root"]


# --- a uid of its own, as root --------------------------------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="an ordinary user has only its own uid to give")
def test_as_root_each_sandbox_runs_as_a_uid_of_its_own_that_owns_its_output_alone():
    code = ("import os, stat, sys, time\nst = os.stat('/leakbed/out')\n"
            "print(os.getuid(), st.st_uid, oct(stat.S_IMODE(st.st_mode)), flush=True)\ntime.sleep(60)")
    boxes = [Sandbox(Limits()).popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(3)]
    try:
        said = [p.stdout.readline().decode().split() for p in boxes]
        got = [int(s[0]) for s in said]
        assert len(set(got)) == 3 and all(uids.in_range(u) for u in got), said
        assert [int(s[1]) for s in said] == got and {s[2] for s in said} == {"0o700"}  # its output: its own, closed
        assert [p.lease.uid for p in boxes] == got
    finally:
        for p in boxes:
            sandbox.end(p)
    assert all(p.lease.fd == -1 for p in boxes)  # the leases went with the sandboxes


@pytest.mark.skipif(not ROOT, reason="leases are root's")
def test_a_uid_still_running_a_process_is_not_leased_again():
    """A sandbox left behind by a leakbed that was killed keeps its uid: the lease skips it."""
    held = [uids.lease()]  # the lowest free uid, held: the next lease skips it
    taken = held[0].uid + 1
    stray = subprocess.Popen(["setpriv", f"--reuid={taken}", f"--regid={taken}", "--clear-groups", "sleep", "60"])
    try:
        until = time.monotonic() + 10
        while os.stat(f"/proc/{stray.pid}").st_uid != taken and time.monotonic() < until:
            time.sleep(0.01)
        # lease until past the running uid: a lower one another xdist worker's sandbox freed meanwhile may come first
        while len(held) < 64 and held[-1].uid <= taken:
            held.append(uids.lease())
        leased = [lease.uid for lease in held]
        assert taken not in leased and leased[-1] > taken and uids.in_range(leased[-1]), leased  # skipped, not leased
        held.pop(0).release()
        again = uids.lease()
        assert again.uid != taken and again.uid <= leased[-1]  # released: leased again (or a lower one another freed)
        again.release()
    finally:
        for lease in held:
            lease.release()
        stray.kill()
        stray.wait()


# --- sandboxes cannot see, trace or read each other ------------------------------------------------------------------

# a neighbour: holds a marker in its output, a pipe, an abstract socket, and waits
NEIGHBOUR = r"""
import os, socket, sys, time
open("/leakbed/out/marker", "w").write(sys.argv[1])
r, w = os.pipe()
os.write(w, sys.argv[1].encode())
s = socket.socket(socket.AF_UNIX)
s.bind("\0leakbed-neighbour-" + sys.argv[1])
s.listen()
print("ready", os.getpid(), flush=True)
time.sleep(120)
"""
# a prober: every way to reach the neighbour it can name (the host pids are given: the adversary guesses them)
PROBE = r"""
import errno, json, os, socket, sys
pids = [int(p) for p in sys.argv[2].split(",")]
marker = sys.argv[1]
out = {"proc": sorted(p for p in os.listdir("/proc") if p.isdigit()), "signal": {}, "mem": {}, "root": {}, "fds": {}}
def kill0(pid):
    try:
        os.kill(pid, 0)
        return "ok"
    except OSError as err:
        return errno.errorcode[err.errno]
out["others"] = [p for p in range(2, 1 << 15) if kill0(p) != "ESRCH"]
for pid in pids:
    out["signal"][pid] = kill0(pid)
    for what, path in (("mem", f"/proc/{pid}/mem"), ("root", f"/proc/{pid}/root/leakbed/out/marker")):
        try:
            with open(path, "rb") as f:
                out[what][pid] = "read " + f.read(64).decode(errors="replace")
        except OSError as err:
            out[what][pid] = errno.errorcode[err.errno]
    try:
        out["fds"][pid] = f"listed {len(os.listdir(f'/proc/{pid}/fd'))}"
    except OSError as err:
        out["fds"][pid] = errno.errorcode[err.errno]
found = []
for top in ("/tmp", "/dev/shm", "/leakbed"):
    for d, dirs, files in os.walk(top):
        for name in files:
            if not os.path.isfile(os.path.join(d, name)) or os.path.islink(os.path.join(d, name)):
                continue  # a FIFO would block the reader
            try:
                with open(os.path.join(d, name), "rb") as f:
                    if marker.encode() in f.read(1 << 16):
                        found.append(os.path.join(d, name))
            except OSError:
                pass
out["marker_found"] = found
try:
    c = socket.socket(socket.AF_UNIX)
    c.connect("\0leakbed-neighbour-" + marker)
    out["socket"] = "connected"
except OSError as err:
    out["socket"] = errno.errorcode[err.errno]
print(json.dumps(out))
"""
# run by the spawning user: a neighbour sandbox and a prober sandbox side by side
PAIR = r"""
import json, os, subprocess, sys, time
from leakbed.core.processes import descendants
from leakbed.workers.sandbox import Limits, Sandbox, end
neighbour_code, probe_code, marker = sys.stdin.read().split("\0")
n = Sandbox(Limits()).popen([sys.executable, "-c", neighbour_code, marker], stdout=subprocess.PIPE)
try:
    assert n.stdout.readline().startswith(b"ready")
    pids = [n.pid, *descendants(n.pid)]
    p = Sandbox(Limits()).popen([sys.executable, "-c", probe_code, marker, ",".join(map(str, pids))], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()[-2000:]
    print(json.dumps({"probe": json.loads(out), "pids": pids}))
finally:
    end(n)
"""


def check_isolated(found: dict) -> None:
    probe = found["probe"]
    assert probe["proc"] == ["1"] and probe["others"] == []  # only itself in its /proc, nothing else to signal
    for pid in map(str, found["pids"]):
        assert probe["signal"][pid] == "ESRCH" or pid == "1", probe["signal"]
        assert probe["mem"][pid] == "ENOENT" or pid == "1" and probe["mem"][pid] in ("EACCES", "EPERM", "EIO")
        assert not probe["root"][pid].startswith("read") and (pid == "1" or probe["fds"][pid] == "ENOENT")
    assert probe["marker_found"] == [] and probe["socket"] == "ECONNREFUSED"


def test_two_sandboxes_cannot_see_signal_trace_or_read_each_other():
    marker = os.urandom(8).hex()
    done = subprocess.run([sys.executable, "-c", PAIR], input="\0".join([NEIGHBOUR, PROBE, marker]), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_isolated(json.loads(done.stdout))


def test_two_sandboxes_of_one_ordinary_user_cannot_see_signal_trace_or_read_each_other(tmp_path_factory):
    """One uid for both: the namespaces and the allowlist keep them apart."""
    user = ordinary(tmp_path_factory.mktemp("ordinary"))
    marker = os.urandom(8).hex()
    done = user.run([sys.executable, "-c", PAIR], cwd=user.home, timeout=300, stdin="\0".join([NEIGHBOUR, PROBE, marker]))
    assert done.returncode == 0, done.stderr[-3000:]
    check_isolated(json.loads(done.stdout))


def test_unsandboxed_the_same_probe_reaches_its_neighbour(tmp_path):
    """The control: the probe run on the host, beside the same neighbour unsandboxed, signals it and reads its pipe
    and its marker."""
    marker = os.urandom(8).hex()
    work = tmp_path / "leakbed" / "out"
    work.mkdir(parents=True)
    neighbour = NEIGHBOUR.replace("/leakbed/out/marker", str(work / "marker"))
    n = subprocess.Popen([sys.executable, "-c", neighbour, marker], stdout=subprocess.PIPE)
    try:
        assert n.stdout.readline().startswith(b"ready")
        probe = PROBE.replace('for top in ("/tmp", "/dev/shm", "/leakbed")', f'for top in ({str(tmp_path)!r},)')
        assert probe != PROBE
        done = subprocess.run([sys.executable, "-c", probe, marker, str(n.pid)], capture_output=True, text=True, timeout=300)
        found = json.loads(done.stdout)
        assert found["signal"][str(n.pid)] == "ok" and found["fds"][str(n.pid)].startswith("listed")
        assert found["marker_found"] and found["socket"] == "connected"
    finally:
        n.kill()
        n.wait()
