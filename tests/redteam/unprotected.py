"""The hostile probes where the protection is off: each route exercised the way the old code let it run (the plugin's
module imported beside the truth, its scorer in the referee's process, a root reader that follows links, a root
chown walk, ``numpy.load`` on a reply), to show that the probe does find something there and so that a test of the
route can fail.

``<red team's environment>/bin/python tests/redteam/unprotected.py ROUTE JSON``, run by ``test_interfaces.py`` in
the red team's own environment (where the hostile plugin is installed), in a scratch folder, with
``LEAKBED_HOSTILE_DRY=1``: the probes then write only into that folder and record where else they could have
written. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ["LEAKBED_HOSTILE_DRY"] = "1"  # before any hostile module is imported


def imported_beside_the_truth(args: dict) -> dict:
    """The plugin's module imported by a trusted process that holds the referee's sealing (the old CLI, ServerApp)."""
    import leakbed.core.store  # noqa: F401 - what the old trusted process had loaded
    import leakbed.workers.pool  # noqa: F401
    from leakbed.referee.seal import Sealer

    os.chdir(args["run"])
    import leakbed_hostile.importtime as hostile

    Sealer(Path(args["run"]) / "sealed-after").seal("0f0f", "user-sealed-after-import", 3)
    copied = Path(args["run"], ".leakbed-hostile-owners.jsonl")
    return {"found": hostile.FOUND, "copied": copied.read_text() if copied.exists() else ""}


def scorer_in_the_referees_process(args: dict) -> dict:
    """The plugin's scorer called in the referee's process (as the old judge did), beside the run's folder."""
    import numpy as np

    import leakbed.referee.scorers  # noqa: F401 - what the referee's process has loaded
    from leakbed.plugin import ScoreContext, TruthView

    os.chdir(args["run"])
    from leakbed_hostile import scorer

    ids = np.asarray(args["ids"])
    outputs = {"ids": ids, "classes": np.asarray(["a", "b"]), "scores": np.random.default_rng(0).random((len(ids), 2))}
    ctx = ScoreContext("hostile-scorer", "hostile-scorer", None, outputs, TruthView({"user_id": args["owners"]}), ids)
    return scorer.score(ctx)


def peer_on_the_host(args: dict) -> dict:
    from leakbed_hostile import probes

    return probes.foreign_outputs([args["run"]], own="hostile-peer")


def links_read_by_root(args: dict) -> dict:
    """Links planted where a reader that follows them (the old root reader) would read them."""
    from leakbed_hostile import probes

    from leakbed.workers.hostile import HostileData, read_beneath

    planted = probes.plant_links(args["folder"], args["target"], "hostile-links")
    naive = Path(args["folder"], "knowledge.json").read_text()
    hard = Path(args["folder"], f"hard-{os.path.basename(args['target'])}")
    refused = {}
    fd = os.open(args["folder"], os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("knowledge.json", hard.name):
            try:
                read_beneath(fd, name, 1 << 20)
                refused[name] = ""
            except HostileData as err:
                refused[name] = str(err)
    finally:
        os.close(fd)
    return {"planted": planted, "naive_read": naive, "hard_read": hard.read_text() if hard.exists() else "",
            "read_beneath": refused}  # fmt: skip


def chowned_by_a_root_walk(args: dict) -> dict:
    """The race against the old chown walk: as root, chown every entry under the lane's folder (following links)."""
    from leakbed_hostile import probes

    folder, target = args["folder"], args["target_dir"]
    result: dict = {}
    racer = threading.Thread(target=lambda: result.update(probes.race(folder, target, 2.0)))
    racer.start()
    while racer.is_alive():
        for root, dirs, files in os.walk(folder):
            for name in [*dirs, *files]:
                try:
                    os.chown(os.path.join(root, name), 65534, 65534)  # follows a link, as os.chown does by default
                except OSError:
                    continue
        time.sleep(0.001)
    racer.join()
    for root, dirs, files in os.walk(folder):  # the walk after the race, as the old pool did at the end of a fit
        for name in [*dirs, *files]:
            try:
                os.chown(os.path.join(root, name), 65534, 65534)
            except OSError:
                continue
    st = os.stat(target)
    return {"race": result, "target_uid": st.st_uid, "target_gid": st.st_gid}


def bomb_loaded(args: dict) -> dict:
    import io
    import zipfile

    from leakbed_hostile import probes

    from leakbed.workers.hostile import HostileData, load_npz

    body = probes.zip_bomb(1, ["a", "b"], ["u0", "u1"])
    claimed = {i.filename: i.file_size for i in zipfile.ZipFile(io.BytesIO(body)).infolist()}
    try:
        load_npz(body, max_bytes=16 << 20)
        refused = ""
    except HostileData as err:
        refused = str(err)
    return {"bytes": len(body), "claimed": claimed, "load_npz": refused}


ROUTES = {
    "import": imported_beside_the_truth,
    "scorer": scorer_in_the_referees_process,
    "peer": peer_on_the_host,
    "links": links_read_by_root,
    "race": chowned_by_a_root_walk,
    "bomb": bomb_loaded,
}

if __name__ == "__main__":
    print(json.dumps(ROUTES[sys.argv[1]](json.loads(sys.argv[2])), default=str))
