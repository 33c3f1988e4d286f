"""The red team against leakbed's interfaces: a hostile plugin package, installed the normal way, tries every route
out of the attack side found on the old code, during real runs; each route must hold.

The plugin (``tests/redteam/hostile``, package ``leakbed_hostile``) publishes one attack per route under
``leakbed.attacks`` and imports leakbed only from ``leakbed.plugin``. It is pip-installed (``pip install --no-deps
-e``) into an environment of the red team's own (``tests/redteam/childenv.py``: a second virtual environment whose
path file adds the project environment's ``site-packages``, with the project's console scripts re-made on its
interpreter), never into the project's environment, which other suites and xdist workers share: there the hostile
attacks would appear in every catalog and run. Runs are what a user types, ``<env>/bin/python -m leakbed.cli run
...`` (and ``validate``), with every trusted process of the run watched for its peak memory.

Two small federations (6 users, 2 rounds, one prior, seed 7) are shared by the module: the hostile run (every hostile
attack beside ``knn`` and an honest re-identification attack, ``hostile-honest``) and the honest run (those two
alone). Each test then reads one route's evidence: what the hostile attack reported from inside (its ``evidence``
output), what trusted code wrote (metrics, report, logs, outputs), and the host around the run (sentinel files the
attacker knows the paths of, marker files, processes). Where cheap, the same probe is also run where the protection
is off (``tests/redteam/unprotected.py``: the old code's way), to show that it does find something there.

Routes (as found on the old code), the probe, and what holding means:

- import-time code beside the truth: ``hostile-import`` patches the sealer, pool and store it finds, walks for the
  truth, marks every folder it can write. Holds: only sandboxes import it (no mark on the host, the truth intact,
  nothing read back).
- the plugin's scorer in the referee's process: ``hostile-scorer``'s scorer reads undeclared fields, walks, writes,
  patches. Holds: it sees only ``user_id``, its result is bounded, its writes reach no host folder.
- one process for all attacks: ``hostile-peer`` looks through /proc, ptrace, /leakbed and output-like files anywhere.
  Holds: it sees only itself; knn's and an honest attack's numbers equal the honest run's.
- root followed planted links: ``hostile-links`` (symlinks, hard links, a FIFO), ``hostile-names`` (array names that
  are paths). Holds: the host sentinel is untouched; path-like names are refused.
- the chown race: ``hostile-race`` swaps a folder for a link to a host folder. Holds: no host file changes owner.
- unbounded output: ``hostile-bomb`` (a zip bomb on the reply pipe), ``-bigframe``, ``-huge``, ``-flood``, ``-error``,
  ``-forge``, ``-lastwords``. Holds: refused before allocation, the ServerApp's memory bounded, logs capped, texts
  bounded and labelled as the attack's words.
- a fit that never returns: ``hostile-hang``. Holds: it ends at its deadline, its processes with it; the others finish.
- omission: ``hostile-omit`` returns its confident half. Holds: its AP does not exceed its honest twin's; coverage < 1.
- disk fill: ``hostile-disk``. Holds: it stops at its quota.
- the sandbox showed its host: ``hostile-peer`` reads /proc. Holds: pid 1 is the lane; no path of the run in a command
  line or environment. (The mount table does show the run's store path: a known leak, marked xfail.)
- needs not checked before start: ``hostile-honest`` under ``fl.secure_aggregation = "secagg+"``. Holds: refused in one
  line, exit 2, in every entry point, nothing written.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pytest

from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.noise import NOISE_FILE
from leakbed.workers import uids
from tests.redteam.childenv import TOKEN_ENV, ChildEnv, Peaks, Watch, build

pytestmark = pytest.mark.redteam
HERE = Path(__file__).resolve().parent
UNPROTECTED = HERE / "unprotected.py"
REPO = HERE.parents[1]
SANDBOX_UID = 65534  # the uid the old code's chown walk handed folders to (unprotected.py)


def sandbox_uid(uid: int) -> bool:
    """A sandbox's uid: as root, one leased for it alone from leakbed's reserved range (workers.uids); else this user's."""
    return uids.in_range(uid) if os.geteuid() == 0 else uid == os.getuid()

# the hostile package's own names (copied: the test process never imports hostile code)
MARKER, OWNERS_DROP, HANG_MARK = ".leakbed-hostile-marker", ".leakbed-hostile-owners.jsonl", "leakbed-hostile-hang"
FORGED = "boundary verified, every attack scored at chance"  # the line it forges, after "leakbed: "
QUOTA_MB, TMP_MB, RESULT_MB, LOG_MB, DEADLINE_S = 64, 64, 16, 4, 45
SMALL = [
    "seed=7",
    "data.synthetic.users=6",
    "data.synthetic.examples_per_user=40",
    "data.synthetic.image_size=8",
    "fl.rounds=2",
    "fl.fraction_train=1.0",
    'split.priors=["random"]',
    "workers.count=2",
    f"workers.task_deadline={DEADLINE_S}",
    f"workers.limits.output={QUOTA_MB}",
    f"workers.limits.tmp={TMP_MB}",
    f"workers.limits.result={RESULT_MB}",
    f"workers.limits.log={LOG_MB}",
    "simulation.client_cpus=2",  # one ClientApp actor on the suite's 2 cores (no number depends on it)
]
HONEST = ["knn", "hostile-honest"]
HOSTILE = [
    *HONEST, "hostile-omit", "hostile-import", "hostile-scorer", "hostile-peer", "hostile-links", "hostile-names",
    "hostile-race", "hostile-bomb", "hostile-bigframe", "hostile-huge", "hostile-flood", "hostile-error",
    "hostile-forge", "hostile-lastwords", "hostile-hang", "hostile-disk",
]  # fmt: skip
FAILING = ["hostile-names", "hostile-bomb", "hostile-bigframe", "hostile-huge", "hostile-flood", "hostile-error",
           "hostile-forge", "hostile-lastwords", "hostile-hang"]  # fmt: skip
ATTACKERS_ESCAPES = re.compile("\x1b\\]|\x1b\\[2J|\x1b\\[H|\x9b|\u202e")  # the hostile texts' own: clear, retitle, reverse


# --- the red team's environment and its runs ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def child(tmp_path_factory: pytest.TempPathFactory) -> ChildEnv:
    """The red team's environment with the hostile plugin installed (shared by this session's xdist workers)."""
    base = tmp_path_factory.getbasetemp()
    return build((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "redteam-hostile-env")


def _state(paths: list[Path]) -> dict[str, tuple]:
    """Each path (and everything under a folder): content hash, mode, owner, group, mtime, inode, links."""
    out = {}
    for top in paths:
        for p in [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]:
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
            out[str(p)] = (digest, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ino, st.st_nlink)
    return out


@dataclass
class Run:
    """One ``leakbed run`` in the red team's environment, and what it left."""

    folder: Path
    cwd: Path
    home: Path
    rc: int
    out: str
    err: str
    seconds: float
    started: float
    peaks: Peaks
    host_before: dict = field(default_factory=dict)  # the host files the attacker aimed at, before and after the run
    host_after: dict = field(default_factory=dict)

    @cached_property
    def metrics(self) -> dict:
        return json.loads((self.folder / "random" / "metrics.json").read_text())

    @cached_property
    def report(self) -> str:
        return (self.folder / "report.md").read_text()

    def outputs(self, name: str) -> dict[str, np.ndarray]:
        """What the pool checked and filed for ``name`` (trusted data)."""
        with np.load(self.folder / "random" / "outputs" / f"{name}.npz", allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def evidence(self, name: str) -> dict:
        return json.loads(str(self.outputs(name)["evidence"]))

    def result(self, name: str) -> dict:
        m = self.metrics
        return m["attackers"].get(name) or m["suite"].get(name) or m["plugin_scored"][name]

    def errors(self, name: str) -> list[str]:
        return [e for e in self.metrics["pool"]["errors"] if f"'{name}'" in e]

    def texts(self) -> dict[str, str]:
        """Every text trusted code wrote or printed about the run (attack logs aside: those are the attacks' own)."""
        logs = {f"log {p.name}": p.read_text(errors="replace") for p in (self.folder / "logs").glob("*.log")}
        return {"metrics.json": (self.folder / "random" / "metrics.json").read_text(), "report.md": self.report,
                "stdout": self.out, "stderr": self.err, **logs}  # fmt: skip


def leakbed_run(child: ChildEnv, tmp: Path, suite: list[str], *extra: str) -> Run:
    folder, cwd, home = tmp / "run", tmp / "cwd", tmp / "home"
    cwd.mkdir(parents=True)
    home.mkdir()
    sets = [*SMALL, f"attack.suite={json.dumps(suite)}", *extra]
    token = uuid.uuid4().hex
    watch = Watch(token)
    watch.start()
    t0 = time.monotonic()
    started = time.time()
    done = child.run(["-m", "leakbed.cli", "run", "--out", str(folder), *(a for s in sets for a in ("--set", s))], cwd, home,
                     timeout=1500, **{TOKEN_ENV: token})  # fmt: skip
    seconds = time.monotonic() - t0
    peaks = watch.stop()
    print(f"\n[redteam] leakbed run of {len(suite)} attacks: {seconds:.0f} s, rc {done.returncode}")
    assert done.returncode == 0, done.stderr[-4000:]
    return Run(folder, cwd, home, done.returncode, done.stdout, done.stderr, seconds, started, peaks)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Files on the host the attacker knows the paths of (it aims its links and its chown race at them)."""
    top = tmp_path_factory.mktemp("host")
    secret = top / "secret.txt"
    secret.write_bytes(os.urandom(4096))
    secret.chmod(0o600)
    folder = top / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "inside.txt").write_text("host data\n")
    folder.chmod(0o700)
    return {"secret": secret, "folder": folder, "paths": [secret, folder]}


@pytest.fixture(scope="module")
def hostile_run(child: ChildEnv, host: dict, tmp_path_factory: pytest.TempPathFactory) -> Run:
    before = _state(host["paths"])
    run = leakbed_run(
        child, tmp_path_factory.mktemp("hostile"), HOSTILE,
        f"attack.params.hostile-links.target='{host['secret']}'",
        f"attack.params.hostile-race.target_dir='{host['folder']}'",
    )  # fmt: skip
    run.host_before, run.host_after = before, _state(host["paths"])
    return run


@pytest.fixture(scope="module")
def honest_run(child: ChildEnv, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return leakbed_run(child, tmp_path_factory.mktemp("honest"), HONEST)


def unprotected(child: ChildEnv, tmp: Path, route: str, **args: object) -> dict:
    """A probe where the protection is off (``tests/redteam/unprotected.py``), in the red team's environment."""
    tmp.mkdir(parents=True, exist_ok=True)
    done = child.run([str(UNPROTECTED), route, json.dumps(args, default=str)], tmp, tmp, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def marks_on_the_host(run: Run, child: ChildEnv) -> list[str]:
    """Hostile marker files and owner copies in every host folder a trusted process of the run could have written
    them to (its working folder, HOME, the run, the environments, the plugin's and leakbed's folders, /tmp, /dev/shm),
    made since the run started."""
    found = []
    deep = [run.folder, run.cwd, run.home, child.root, HERE / "hostile"]
    shallow = [Path("/tmp"), Path("/dev/shm"), REPO, *(REPO / p for p in ("attacks", "core", "workers", "leakbed")),
               Path(os.path.expanduser("~"))]  # fmt: skip
    for top, tops in ((deep, True), (shallow, False)):
        for folder in top:
            paths = folder.rglob("*") if tops else folder.glob("*")
            for p in paths:
                if p.name in (MARKER, OWNERS_DROP) and p.lstat().st_mtime >= run.started - 1:
                    found.append(str(p))
    return found


def truth_intact(run: Run, honest: Run) -> None:
    """The sealed truth is one record per anonymous update the store holds, each naming a user of the run, with the
    fields the honest run's truth has and no other; the referee's folder holds only the truth, the key and the run's
    DP noise secret (``referee.noise``), closed to everyone else."""
    referee = run.folder / "referee" / "random"
    assert sorted(p.name for p in referee.iterdir()) == sorted(["truth.jsonl", "update-ids.key", NOISE_FILE])
    assert stat.S_IMODE(referee.stat().st_mode) == 0o700 and referee.stat().st_uid == os.getuid()
    for p in referee.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600 and p.stat().st_uid == os.getuid() and p.stat().st_nlink == 1, p
    records = [json.loads(line) for line in (referee / "truth.jsonl").read_text().splitlines()]
    ids = set()
    for f in (run.folder / "attack-store" / "random" / "anon").glob("*.npz"):
        with np.load(f, allow_pickle=False) as z:
            ids |= {str(i) for i in z["ids"]}
    assert sorted(r["update_id"] for r in records) == sorted(ids) and len(ids) == 12
    users = {u["id"] for u in json.loads((run.folder / "attack-store" / "random" / "knowledge.json").read_text())["users"]}
    fields = {tuple(sorted(json.loads(line))) for line in (honest.folder / "referee" / "random" / "truth.jsonl").open()}
    assert len(fields) == 1 and {"update_id", "user_id", "round"} <= set(next(iter(fields))), fields
    assert all(tuple(sorted(r)) in fields and r["user_id"] in users for r in records), records[:2]


def said_before(text: str, phrase: str) -> list[str]:
    """Lines of ``text`` holding ``phrase`` without an attack's label (``said``) before it: forged leakbed words."""
    bad = []
    for line in text.splitlines():
        at = line.find(phrase)
        if at >= 0 and "said" not in line[:at]:
            bad.append(line[:300])
    return bad


# --- the routes -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_import_time_code_runs_only_in_sandboxes(hostile_run: Run, honest_run: Run, child: ChildEnv, tmp_path: Path) -> None:
    found = hostile_run.evidence("hostile-import")
    # it ran at import, in its own lane: the sandbox user, leakbed's lane entry point, nothing of the trusted side to patch
    assert sandbox_uid(found["uid"]) and "workers/inside/lane.py" in " ".join(found["argv"]), found
    assert not [p for p in found["patched"] if p.startswith(("referee", "server"))], found["patched"]
    assert found["hunt"]["files"] == [] and found["hunt"]["owners"] == 0 and found["owners_read_back"] == 0, found
    assert found["hunt_in_lane"]["files"] == [] and found["hunt_in_lane"]["owners"] == 0
    written = found["marks"]["written"]
    assert written and all(p.startswith(("/leakbed/out/", "/tmp/", "/dev/shm/")) for p in written), written
    # no trusted process imported it: no mark anywhere on the host, and the truth is intact
    assert marks_on_the_host(hostile_run, child) == []
    truth_intact(hostile_run, honest_run)
    r = hostile_run.result("hostile-import")
    assert r["coverage"] == 1.0 and r["top1"] < 0.5 and r["ap"] < 2 * r["chance_ap"], r  # its own random ranking
    # where it is imported beside the truth (the old CLI and ServerApp did), it patches the sealer and finds the truth
    run = tmp_path / "old-run"
    (run / "referee" / "random").mkdir(parents=True)
    (run / "referee" / "random" / "truth.jsonl").write_text('{"update_id": "0a", "user_id": "alice", "round": 1}\n')
    old = unprotected(child, tmp_path / "demo", "import", run=str(run))
    patched = old["found"]["patched"]
    assert "leakbed.referee.seal.Sealer.seal" in patched and "leakbed.workers.pool.AttackPool._write_output" in patched, patched
    assert old["found"]["hunt"]["owners"] >= 1 and "user-sealed-after-import" in old["copied"], old
    assert old["found"]["marks"]["would"], "as root beside the truth it could write everywhere it tried"


@pytest.mark.slow
def test_a_plugin_scorer_sees_only_the_truth_it_declared(hostile_run: Run, child: ChildEnv, tmp_path: Path) -> None:
    r = hostile_run.result("hostile-scorer")
    assert r["scored_by"] == "plugin", r
    # what it was handed and could reach: the one field it declared, its request, outputs and ids; no truth file
    assert r["fields_seen"] == "user_id" and r["handed_truth_fields"] == "user_id" and r["undeclared_fields_read"] == 0, r
    assert r["handed_files"] == "given.npy,outputs.npz,request.json", r
    assert r["truth_files"] == 0 and r["owners_found"] == 0 and sandbox_uid(r["uid"]), r
    # its writes stayed in its own private /tmp and /dev/shm, gone with its sandbox: no attack can read them
    assert r["marks_written"] and all(p.startswith(("/tmp/", "/dev/shm/")) for p in r["marks_written"]), r["marks_written"]
    assert marks_on_the_host(hostile_run, child) == []
    # whatever it patched was in its own process; its result is bounded, its keys checked, its words made one line
    assert not any(p.startswith("referee.") for p in r["patched"]), r["patched"]
    assert "bad key!" not in r and "__class__" not in r and r["not_finite"] is None
    assert len(r["long_text"]) <= 300 and r["nested"]["a"]["b"]["c"] is None
    assert all("\x1b" not in n and "\n" not in n for n in r["notes"]), r["notes"]
    assert 0.0 <= r["top1"] <= 1.0 and r["top1"] < 1.0
    # in the referee's process (the old judge called it there), the same scorer finds the truth and patches the referee
    run = tmp_path / "old-run"
    (run / "referee" / "random").mkdir(parents=True)
    (run / "referee" / "random" / "truth.jsonl").write_text(
        "".join(json.dumps({"update_id": f"{i:02x}", "user_id": f"u{i % 2}", "round": 1, "property": True}) + "\n"
                for i in range(4))
    )  # fmt: skip
    old = unprotected(child, tmp_path / "demo", "scorer", run=str(run), ids=["00", "01"], owners={"00": "a", "01": "b"})
    assert old["truth_files"] >= 1 and old["owners_found"] >= 4 and "leakbed.referee.scorers.score_one" in old["patched"], old


@pytest.mark.slow
def test_another_attacks_results_are_out_of_reach(hostile_run: Run, honest_run: Run, child: ChildEnv, tmp_path: Path) -> None:
    found = hostile_run.evidence("hostile-peer")
    assert found["pids"] == [1] and found["self"] == 1, found["pids"]  # no other lane, no trusted process
    # pids 2-256: none to signal; ptrace refused (seccomp) or finding no one
    assert found["guessed"] and all(g in ("ESRCH/ESRCH", "EPERM/ESRCH") for g in found["guessed"]), found["guessed"]
    assert found["outputs"]["found"] == [] and found["outputs"]["writable"] == [], found["outputs"]
    assert found["marks_seen"] == [] and found["truth"]["files"] == [] and found["truth"]["owners"] == 0, found
    assert "/leakbed/upstream" not in found["leakbed"], found["leakbed"]  # it builds on no attack: given none
    # the attacks beside it score exactly as without it (same seed): nothing rewrote their outputs or their scores
    for name in HONEST:
        with_it, without = hostile_run.result(name), honest_run.result(name)
        for key in ("ap", "chance_ap", "top1", "top5", "coverage"):
            assert with_it[key] == without[key], (name, key, with_it[key], without[key])
        a, b = hostile_run.outputs(name)["scores"], honest_run.outputs(name)["scores"]
        assert np.array_equal(a[np.lexsort(a.T)], b[np.lexsort(b.T)]), name
    # on the host (one process for all attacks, the old worker), the same search finds their outputs and can write them
    old = unprotected(child, tmp_path, "peer", run=str(hostile_run.folder))
    assert any(p.endswith("/outputs/knn.npz") for p in old["found"]) and old["writable"], old


@pytest.mark.slow
def test_links_an_attack_plants_are_never_followed(hostile_run: Run, host: dict, child: ChildEnv, tmp_path: Path) -> None:
    planted = hostile_run.evidence("hostile-links")
    for where in ("folder", "tmp"):
        p = planted[where]
        assert any(m.startswith("knowledge.json ->") for m in p["made"]), p  # symlinks: made, in its own tmpfs
        assert p["target_visible"] is False, p
        assert not [m for m in p["made"] if m.startswith("hard")], p  # no hard link to anything outside its tmpfs
    assert hostile_run.host_after == hostile_run.host_before
    # array names that are paths out of its folder: the whole output refused, nothing written by those names
    assert any("unsafe name" in e for e in hostile_run.errors("hostile-names")), hostile_run.errors("hostile-names")
    assert "hostile-names" in hostile_run.metrics["attackers_failed"]
    assert not Path("/tmp/leakbed-hostile-names.npy").exists()
    outputs = sorted(p.name for p in (hostile_run.folder / "random" / "outputs").rglob("*") if p.is_file())
    expected = {f"{n}.npz" for n in HOSTILE if n not in FAILING} | {f"{n}.given.npy" for n in HOSTILE if n not in FAILING}
    assert set(outputs) == expected, set(outputs) ^ expected
    stray = [str(p) for p in hostile_run.folder.rglob("*") if p.is_symlink() or (p.is_file() and p.stat().st_nlink > 1)]
    assert stray == [], stray
    # planted where a root reader that follows links reads (the old pool's), they hand it the host file
    target = tmp_path / "secret.txt"
    target.write_text("host secret\n")
    folder = tmp_path / "lane"
    folder.mkdir()
    old = unprotected(child, tmp_path / "demo", "links", folder=str(folder), target=str(target))
    assert old["naive_read"] == "host secret\n" and old["hard_read"] == "host secret\n", old
    assert all(old["read_beneath"].values()), old["read_beneath"]  # what trusted code uses now refuses both


@pytest.mark.slow
def test_the_chown_race_changes_no_host_file(hostile_run: Run, host: dict, child: ChildEnv, tmp_path: Path) -> None:
    race = hostile_run.evidence("hostile-race")
    assert race["swaps"] > 100 and race["left"] == str(host["folder"]), race
    assert hostile_run.host_after == hostile_run.host_before
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in [hostile_run.folder, *hostile_run.folder.rglob("*")]}
    assert owners == {(os.getuid(), os.getgid())}, owners  # nothing of the run was handed to the sandbox user
    if os.geteuid() != 0:
        return
    # against the old root chown walk over its folder, the same race hands the host folder to the sandbox user
    target = tmp_path / "host-folder"
    target.mkdir(mode=0o700)
    (tmp_path / "lane").mkdir()
    old = unprotected(child, tmp_path / "demo", "race", folder=str(tmp_path / "lane"), target_dir=str(target))
    assert (old["target_uid"], old["target_gid"]) == (SANDBOX_UID, SANDBOX_UID), old


@pytest.mark.slow
def test_bombs_on_the_reply_pipe_are_refused_before_allocation(hostile_run: Run, child: ChildEnv, tmp_path: Path) -> None:
    failed = hostile_run.metrics["attackers_failed"]
    bomb = hostile_run.errors("hostile-bomb")
    assert "hostile-bomb" in failed and any(re.search(r"claims 10737\d{5} bytes uncompressed", e) for e in bomb), bomb
    big = hostile_run.errors("hostile-bigframe")
    assert "hostile-bigframe" in failed and any(f"a body of {1 << 62} bytes" in e for e in big), big
    huge = hostile_run.errors("hostile-huge")
    assert "hostile-huge" in failed and any(f"more than the {RESULT_MB << 20} allowed" in e for e in huge), huge
    # the bomb is small on the wire and huge once inflated: numpy.load would have allocated 1 GiB in the ServerApp
    old = unprotected(child, tmp_path, "bomb")
    assert old["bytes"] < 4 << 20 and old["claimed"]["scores.npy"] > 1 << 30 and "claims" in old["load_npz"], old


@pytest.mark.slow
def test_the_serverapp_memory_stays_bounded(hostile_run: Run, honest_run: Run) -> None:
    """The ServerApp (the Simulation Runtime's process, which reads every lane's replies and drains its log) peaks at
    about what it does in the honest run: the 1 GiB bomb, the 64 MiB result, the 88 MiB error frame and 320 MiB of
    log were never held. The CLI reads nothing of the attacks but their declarations: bounded more loosely (its
    report has more rows and figures)."""
    for program, slack_mb in (("flwr-simulation", 96), ("leakbed.cli", 256)):
        hostile, honest = hostile_run.peaks.of(program), honest_run.peaks.of(program)
        print(f"\n[redteam] peak RSS of {program}: {hostile >> 10} MiB with the hostile attacks, {honest >> 10} MiB without")
        assert honest > 0 and hostile > 0, hostile_run.peaks.commands()
        assert hostile < honest + (slack_mb << 10), (program, hostile, honest, hostile_run.peaks.commands())


@pytest.mark.slow
def test_a_log_flood_is_capped(hostile_run: Run) -> None:
    """320 MiB of forged lines: the attack's log keeps at most its cap, the run goes on, and none of the flood reaches
    what trusted code shows. The cap is the log's, not one lane's: an attack whose lane dies and is started again (the
    64 MiB error's, the last words') does not get a fresh cap with each new lane."""
    said = [e for e in hostile_run.errors("hostile-flood") if "hostile-flood wrote" in e]
    assert said and "attack 'hostile-flood' said: \"" in said[0], hostile_run.errors("hostile-flood")
    flooded = int(re.search(r"hostile-flood wrote (\d+) bytes", said[0]).group(1))
    assert flooded >= 320 << 20, flooded
    logs = hostile_run.folder / "attack-logs"
    flood = logs / "random-hostile-flood.log"
    assert "log cap of" in flood.read_bytes()[-8192:].decode(errors="replace")
    sizes = {p.name: p.stat().st_size for p in logs.iterdir()}
    assert sizes["random-hostile-error.log"] > LOG_MB << 19, sizes  # the 64 MiB error's traceback went to its log
    too_big = {name: size for name, size in sizes.items() if size > (LOG_MB << 20) + 4096}
    assert not too_big, f"logs over the {LOG_MB} MiB cap: {too_big}"
    for where, text in hostile_run.texts().items():
        assert "ALL CLEAR" not in text, where  # the flood itself reached nothing trusted code shows


@pytest.mark.slow
def test_huge_and_forged_error_texts_are_bounded_and_labelled(hostile_run: Run) -> None:
    failed = hostile_run.metrics["attackers_failed"]
    assert {"hostile-error", "hostile-forge", "hostile-lastwords"} <= set(failed), failed
    # the 64 MiB text broke the lane's protocol: it was ended, and nothing of the text was kept
    assert any("broke the lane protocol" in e and "a header of" in e for e in hostile_run.errors("hostile-error"))
    # the texts that came back are the attack's words: labelled, quoted, one line, bounded
    for name in ("hostile-forge", "hostile-lastwords"):
        errors = hostile_run.errors(name)
        assert any(f"attack '{name}' said: \"" in e and FORGED in e for e in errors), errors
    for e in hostile_run.metrics["pool"]["errors"]:
        assert len(e) <= 800 and not re.search(r"[\x00-\x1f\x7f-\x9f\u202e]", e), e
    for where, text in hostile_run.texts().items():
        assert len(text) < 1 << 20, (where, len(text))
        assert max(map(len, text.splitlines()), default=0) < 4096, where
        assert not ATTACKERS_ESCAPES.search(text), (where, ATTACKERS_ESCAPES.search(text))
        if not where.startswith("log "):  # Flower colours its own log lines; leakbed's texts hold no escape at all
            assert "\x1b" not in text, where
        assert said_before(text, FORGED) == [], (where, said_before(text, FORGED))
    assert "in its own words (not leakbed's)" in hostile_run.report


@pytest.mark.slow
def test_a_hang_ends_at_its_deadline_and_the_others_finish(hostile_run: Run) -> None:
    m = hostile_run.metrics
    assert any("deadline" in e for e in hostile_run.errors("hostile-hang")), hostile_run.errors("hostile-hang")
    fit = m["pool"]["fit_seconds"].get("hostile-hang")
    assert m["pool"]["deadlines"] >= 1 and (fit is None or math.isnan(fit)), (m["pool"]["deadlines"], fit)
    fitted = [n for n in HOSTILE if n not in FAILING]
    scored = {*m["attackers"], *m["suite"], *m["plugin_scored"]}
    assert all(n in scored for n in fitted), set(fitted) - scored
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and HANG_MARK.encode() in (entry / "cmdline").read_bytes():
                left.append(entry.name)
        except OSError:
            continue
    assert left == [], f"the hang's processes outlived its lane: {left}"
    assert hostile_run.seconds < 900, hostile_run.seconds


@pytest.mark.slow
def test_omission_does_not_raise_the_score(hostile_run: Run) -> None:
    omit, honest = hostile_run.result("hostile-omit"), hostile_run.result("hostile-honest")
    n = omit["n_updates"]
    assert omit["coverage"] == 0.5 and omit["rows_missing"] == n // 2 and honest["coverage"] == 1.0, omit
    assert omit["ap"] <= honest["ap"] and omit["top1"] <= honest["top1"], (omit, honest)
    # scored on the rows it chose to return (the old scorers did), the same outputs score higher
    out = hostile_run.outputs("hostile-omit")
    truth = {}
    for line in (hostile_run.folder / "referee" / "random" / "truth.jsonl").read_text().splitlines():
        rec = json.loads(line)
        truth[rec["update_id"]] = rec["user_id"]
    owners = np.asarray([truth[str(i)] for i in out["ids"]])
    old = reid_metrics(owners, out["classes"], out["scores"])
    print(f"\n[redteam] omission: AP {old['ap']:.3f} on its own rows, {omit['ap']:.3f} by the referee, honest {honest['ap']:.3f}")
    assert old["ap"] > omit["ap"] and old["top1"] > omit["top1"], (old, omit)


@pytest.mark.slow
def test_a_disk_fill_ends_at_its_quota(hostile_run: Run) -> None:
    filled = hostile_run.evidence("hostile-disk")
    for folder, quota in (("/leakbed/out", QUOTA_MB), ("/tmp", TMP_MB), ("/dev/shm", TMP_MB)):
        got = filled[folder]
        assert got["stopped_by"] == "ENOSPC" and 0 < got["bytes"] <= quota << 20, (folder, got)
    assert "hostile-disk" in hostile_run.metrics["suite"]
    size = sum(p.stat().st_size for p in hostile_run.folder.rglob("*") if p.is_file() and not p.is_symlink())
    assert size < len(HOSTILE) * ((LOG_MB << 20) + 4096) + (32 << 20), size  # its logs (capped) and small outputs


@pytest.mark.slow
def test_the_sandbox_shows_no_process_of_the_host(hostile_run: Run) -> None:
    found = hostile_run.evidence("hostile-peer")
    procs = found["processes"]
    assert list(procs) == ["1"], list(procs)
    lane = procs["1"]
    assert "-m leakbed.workers.inside.lane --in" in lane["cmdline"] and "bwrap" not in lane["cmdline"], lane
    assert lane["cwd"] == "/leakbed/out" and lane["root"] == "/", lane
    run = str(hostile_run.folder)
    for text in (lane["cmdline"], lane["environ"]):
        assert run not in text and TOKEN_ENV not in text and "LEAKBED_CACHE" not in text, text


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="does not hold: /proc/self/mountinfo in a sandbox shows the host path of each "
                   "bind mount's source (the run's store folder, e.g. <run>/attack-store/random -> /leakbed/inputs): "
                   "workers/sandbox.py Sandbox._file_system binds host paths, and the kernel shows them")  # fmt: skip
def test_the_mount_table_shows_no_path_of_the_run(hostile_run: Run) -> None:
    sources = hostile_run.evidence("hostile-peer")["mount_sources"]
    assert not [s for s in sources if str(hostile_run.folder) in s], sources


@pytest.mark.slow
def test_an_update_level_attack_under_secagg_is_refused_before_anything_starts(child: ChildEnv, tmp_path: Path) -> None:
    sets = [*SMALL, 'attack.suite=["hostile-honest"]', 'fl.secure_aggregation="secagg+"']
    argv = [a for s in sets for a in ("--set", s)]
    why = "attack.suite: 'hostile-honest' needs individual updates, but fl.secure_aggregation = 'secagg+'"
    out = tmp_path / "run"
    t0 = time.monotonic()
    for command in (["validate", *argv], ["run", "--out", str(out), *argv]):
        done = child.run(["-m", "leakbed.cli", *command], tmp_path, tmp_path, timeout=600)
        assert done.returncode == 2, (command[0], done.stdout[-2000:], done.stderr[-2000:])
        assert done.stderr.strip().splitlines() == [done.stderr.strip()] and why in done.stderr, done.stderr
        assert done.stdout == "", done.stdout
    assert not out.exists()  # nothing written: no run folder, no store, no truth
    # the ServerApp's own preflight (flwr run, deployments) refuses it the same way, before it claims out-dir
    script = (
        "import sys\nfrom leakbed.apps import Refused, checked\n"
        f"try:\n    checked('', {' '.join(sets)!r}, '')\nexcept Refused as err:\n    print(err)\n    sys.exit(2)\n"
    )
    done = child.run(["-c", script], tmp_path, tmp_path, timeout=600)
    assert done.returncode == 2 and why in done.stdout and len(done.stdout.strip().splitlines()) == 1, done.stdout + done.stderr
    assert not out.exists()
    print(f"\n[redteam] three refusals in {time.monotonic() - t0:.0f} s")
    # the same config without secagg+ is accepted: the refusal is the attack's need, checked before start
    done = child.run(["-m", "leakbed.cli", "validate", *argv[:-2]], tmp_path, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_the_hostile_plugin_is_installed_only_in_the_red_teams_environment(child: ChildEnv, tmp_path: Path) -> None:
    """The plugin is found by entry point in its environment, imports leakbed only from leakbed.plugin, and is not
    installed in the project's (so other suites never see it)."""
    import ast
    from importlib.metadata import entry_points

    assert not [ep for ep in entry_points(group="leakbed.attacks") if ep.name.startswith("hostile-")]
    code = "from importlib.metadata import entry_points as e; print(sorted(x.name for x in e(group='leakbed.attacks')))"
    names = child.run(["-c", code], tmp_path, tmp_path, timeout=120).stdout
    assert all(f"'{n}'" in names for n in HOSTILE), names
    ours = {"core", "attacks", "defenses", "client", "server", "referee", "studies", "leakbed", "workers"}
    for path in (HERE / "hostile" / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                assert top not in ours or node.module == "leakbed.plugin", (path.name, node.module)
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] not in ours or a.name == "leakbed.plugin" for a in node.names), path.name
