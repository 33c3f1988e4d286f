"""The hostile attacks, one per route (see each class); scored by the referee's ``reid`` kind unless said otherwise.

Every attack returns, when it returns at all, a closed-world ranking (certain for any owner its route found, random
otherwise) and ``evidence``: what its probe tried and found, as JSON.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from leakbed.plugin import Attack, AttackContext, Outputs, Params, ReidAttack, Scores, Scoring
from leakbed_hostile import probes
from leakbed_hostile.common import FORGED, hunt, ranking, reply_fd, with_evidence


class HostileParams(Params):
    """What the red team tells its hostile attacks about the host (an attacker who knows the layout), and sizes."""

    target: str = ""  # a host file it aims its links at [path]
    target_dir: str = ""  # a host folder it aims its chown race at [path]
    spill_mb: int = 320  # how much the flood writes to stdout and stderr [MiB]
    error_mb: int = 64  # the size of the huge error text [MiB]
    bomb_gib: int = 1  # what the zip bomb inflates to [GiB]
    huge_mb: int = 64  # the size of the huge result it returns [MiB]
    fill_cap_mb: int = 2048  # the disk filler's safety valve per folder [MiB]
    race_seconds: float = 4.0  # how long it swaps a folder for a link [s]


class Hostile(Attack):
    """The shared frame: its probe in ``fit`` (kept in ``self.found``), the ranking and the evidence in ``predict``."""

    params = HostileParams
    scorer = "reid"
    source = "leakbed's red team (tests/redteam): hostile plugin code"
    threat = "hostile plugin code in its lane: everything its sandbox lets it reach"

    def probe(self, ctx: AttackContext) -> dict[str, Any]:
        return {}

    def fit(self, ctx: AttackContext) -> None:
        self.found = self.probe(ctx)

    def owners(self) -> dict[str, str]:
        return {}

    def predict(self, ctx: AttackContext) -> Outputs:
        return with_evidence(ranking(ctx, self.owners(), self.name), getattr(self, "found", {}))


class HostileScorer(Hostile):
    """Its own scorer (``leakbed_hostile.scorer:score``) declares only ``user_id`` and then tries to read more truth,
    to write where an attack could read, and to patch the referee (its ranking is plain random)."""

    name: ClassVar[str] = "hostile-scorer"
    scorer = Scoring(kind="plugin", function="leakbed_hostile.scorer:score", truth=("user_id",))


class HostilePeer(Hostile):
    """Another attack's outputs or lane: every process it can see (``/proc``: command lines, environments, their
    folders through ``/proc/<pid>/root``, ptrace), what ``/leakbed`` holds, output-like files anywhere it can walk
    (and whether it can open them for writing), the mount table's host paths, marks other hostile code left."""

    name: ClassVar[str] = "hostile-peer"

    def probe(self, ctx: AttackContext) -> dict[str, Any]:
        return {
            **probes.processes(),
            "leakbed": probes.listing("/leakbed", 3),
            "outputs": probes.foreign_outputs(["/leakbed", "/tmp", "/dev/shm", "/"], own=self.name),
            "mount_sources": probes.mount_sources(),
            "marks_seen": probes.marks_near(str(ctx.folder)),
            "truth": {k: (len(v) if k == "owners" else v) for k, v in hunt(budget=4.0).items()},
        }


class HostileLinks(Hostile):
    """Symlinks, hard links and a FIFO named like its outputs and inputs in its own folder and in ``/tmp``, aimed at a
    host file (``params.target``), for trusted code to follow when it reads, chowns or deletes them."""

    name: ClassVar[str] = "hostile-links"

    def probe(self, ctx: AttackContext) -> dict[str, Any]:
        target = ctx.params.target or "/work/main/README.md"
        return {"folder": probes.plant_links(str(ctx.folder), target, self.name),
                "tmp": probes.plant_links("/tmp", target, self.name)}


class HostileNames(Hostile):
    """Output arrays named like paths out of its folder (``../../referee/<prior>/truth``, absolute paths, another
    attack's outputs): a writer that turns array names into file names would write there."""

    name: ClassVar[str] = "hostile-names"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = dict(ranking(ctx, {}, self.name))
        one = np.zeros(1, np.float32)
        for name in ("../../referee/random/truth", "../outputs/knn", "/tmp/leakbed-hostile-names", "../../../../etc/cron.d/x"):
            out[name] = one
        return out


class HostileRace(Hostile):
    """Swaps a folder of its own for a symlink to a host folder (``params.target_dir``) and back while it runs, and
    leaves the link: a root chown walk over its folder chowns the host folder."""

    name: ClassVar[str] = "hostile-race"

    def probe(self, ctx: AttackContext) -> dict[str, Any]:
        target = ctx.params.target_dir or "/work/main"
        return probes.race(str(ctx.folder), target, ctx.params.race_seconds)


class HostileBomb(Hostile):
    """A zip bomb on its reply pipe: it writes, by hand, a reply frame saying ``ok`` whose body is an ``.npz`` of a
    few MiB that inflates to ``params.bomb_gib`` GiB, then ends itself (the lane's own reply never comes)."""

    name: ClassVar[str] = "hostile-bomb"

    def fit(self, ctx: AttackContext) -> None:
        anon = ctx.store.read_anon()
        body = probes.zip_bomb(ctx.params.bomb_gib, [str(i) for i in anon["ids"]], sorted(ctx.knowledge.prior))
        fd = reply_fd()
        probes.write_all(fd, probes.frame({"ok": True, "seconds": 0.5, "pid": 1}, len(body)) + body)
        os._exit(0)


class HostileBigFrame(Hostile):
    """A reply frame whose header claims a body of 2**62 bytes, then bytes without end."""

    name: ClassVar[str] = "hostile-bigframe"

    def fit(self, ctx: AttackContext) -> None:
        fd = reply_fd()
        probes.write_all(fd, probes.frame({"ok": True, "seconds": 0.5, "pid": 1}, 1 << 62))
        junk = b"\0" * (1 << 20)
        while True:
            probes.write_all(fd, junk)


class HostileHuge(Hostile):
    """Returns, the ordinary way, an array of ``params.huge_mb`` MiB beside its ranking (the lane serialises it)."""

    name: ClassVar[str] = "hostile-huge"

    def predict(self, ctx: AttackContext) -> Outputs:
        return {**ranking(ctx, {}, self.name), "blob": np.ones(ctx.params.huge_mb << 20, np.uint8)}


class HostileFlood(Hostile):
    """Floods its stdout and stderr with ``params.spill_mb`` MiB of lines forging leakbed's words, then fails, saying
    how much it wrote."""

    name: ClassVar[str] = "hostile-flood"

    def fit(self, ctx: AttackContext) -> None:
        raise RuntimeError(f"hostile-flood wrote {probes.flood(ctx.params.spill_mb)} bytes")


class HostileError(Hostile):
    """Raises an exception whose text is ``params.error_mb`` MiB of forged leakbed lines and terminal escapes."""

    name: ClassVar[str] = "hostile-error"

    def fit(self, ctx: AttackContext) -> None:
        raise RuntimeError(probes.forged_text(ctx.params.error_mb << 20))


class HostileForge(Hostile):
    """Raises an exception of 16 KiB (small enough to come back as its error) forging leakbed's words."""

    name: ClassVar[str] = "hostile-forge"

    def fit(self, ctx: AttackContext) -> None:
        raise RuntimeError(probes.forged_text(16 << 10))


class HostileLastWords(Hostile):
    """Prints forged leakbed lines (and a forged 'Fatal Python error') to stderr and dies: its last words are what
    trusted code shows of a dead lane."""

    name: ClassVar[str] = "hostile-lastwords"

    def fit(self, ctx: AttackContext) -> None:
        text = probes.forged_text(4096)
        forged = f"leakbed: {FORGED} \x1b[2J\x1b[31m\u202e\x9b0m"
        probes.write_all(2, f"{text}\nFatal Python error: {forged}\n{text}\n{forged}\n".encode())
        os._exit(7)


class HostileHang(Hostile):
    """``fit`` never returns (SIGTERM ignored, a child of its own sleeping for ever)."""

    name: ClassVar[str] = "hostile-hang"

    def fit(self, ctx: AttackContext) -> None:
        probes.hang()


class HostileDisk(Hostile):
    """Writes until the disk refuses, in its own folder, ``/tmp`` and ``/dev/shm``."""

    name: ClassVar[str] = "hostile-disk"

    def probe(self, ctx: AttackContext) -> dict[str, Any]:
        found = probes.fill([str(ctx.folder), "/tmp", "/dev/shm"], ctx.params.fill_cap_mb)
        for folder in found:  # room for the reply
            for name in os.listdir(folder):
                if name.startswith("fill-"):
                    os.unlink(os.path.join(folder, name))
        return found


class HostileHonest(ReidAttack):
    """An honest re-identification attack: each update scored by its cosine to every known user's mean shadow
    update (the omission attack's twin)."""

    name: ClassVar[str] = "hostile-honest"
    source = "leakbed's red team (tests/redteam): the omission attack's honest twin"

    def classify(self, params: Any, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        classes = np.unique(y_train)
        cent = np.stack([x_train[y_train == c].mean(axis=0) for c in classes])
        cent /= np.linalg.norm(cent, axis=1, keepdims=True) + 1e-12
        x = x_test / (np.linalg.norm(x_test, axis=1, keepdims=True) + 1e-12)
        return Scores(classes, x @ cent.T)


class HostileOmit(HostileHonest):
    """The same scores, but only its most confident half of the updates is returned (on the old code it was scored on
    those alone, which raised its AP)."""

    name: ClassVar[str] = "hostile-omit"
    source = "leakbed's red team (tests/redteam): omission"

    def predict(self, ctx: AttackContext) -> Outputs:
        out = super().predict(ctx)
        confidence = np.sort(out["scores"], axis=1)[:, -1] - np.sort(out["scores"], axis=1)[:, -2]
        keep = confidence >= np.median(confidence)
        kept = {k: (v[keep] if k in ("ids", "rounds", "scores") else v) for k, v in out.items()}
        return with_evidence(kept, {"returned": int(keep.sum()), "of": int(len(keep))})
