"""Every generated results table agrees with its committed summary: the page holds exactly what
``python -m leakbed.reference.results write`` renders from ``docs/results/data/``, and the summaries hold the
numbers their runs wrote (checked here against the headline numbers quoted in prose)."""

from __future__ import annotations

import json

from leakbed.reference import results


def test_every_generated_table_is_the_summary_rendered() -> None:
    regions = 0
    for page in results.PAGES:
        text = page.read_text(encoding="utf-8")
        regions += len(results.REGION.findall(text))
        assert results.rendered(text) == text, f"{page}: run python -m leakbed.reference.results write"
    assert regions >= 4  # README, the first-run tutorial, closed-world and defenses pages


def test_every_summary_is_used_and_states_its_command() -> None:
    regions = [m["name"] for page in results.PAGES for m in results.REGION.finditer(page.read_text(encoding="utf-8"))]
    used = {name for names in regions for name in names.split(",")}
    for path in results.DATA.glob("*.json"):
        summary = json.loads(path.read_text())
        assert "leakbed" in summary["command"], path.name
        assert path.stem in used, f"{path.name} is shown on no page"


def test_the_quickstart_table_is_the_reports() -> None:
    summary = json.loads((results.DATA / "quickstart.json").read_text())
    table = results.run_table(summary)
    assert "| SVM | 44.8 (14×) | 41.1 | 74.2 | 36.9 (12×) | 32.2 | 61.9 |" in table
    assert table.splitlines()[-1] == "| Chance | 3.2 (1×) | 1.7 | 8.3 | 3.2 (1×) | 1.7 | 8.3 |"
    for prior in summary["priors"].values():  # every attacker far above chance: the README's claim
        assert all(m["x_chance"] > 5 for m in prior.values())


def test_the_suite_tables_say_what_the_further_attacks_page_says() -> None:
    biased = json.loads((results.DATA / "suite-reid.json").read_text())["priors"]
    iid = json.loads((results.DATA / "suite-reid-iid.json").read_text())["priors"]["random"]
    for prior in biased.values():  # the seed's open-world range starts at 3× chance; every suite attack beats chance
        assert prior["open-world"]["x_chance"] > 3 and prior["matching"]["prior_ap"] > 0.75
        assert prior["attributes"]["stl_deanon"] > 10 * prior["attributes"]["deanon_chance"]
    # the IID control: a device's updates stay linkable to each other, not to the prior
    assert iid["matching"]["ap"] > 0.7 and abs(iid["matching"]["prior_ap"] - 0.5) < 0.05
    assert iid["open-world"]["x_chance"] < 1.5 and iid["attributes"]["stl_deanon"] < 2 * iid["attributes"]["deanon_chance"]
    table = results.suite_table(json.loads((results.DATA / "suite-reid.json").read_text()))
    assert table.splitlines()[0] == "| attack | random | chrono | seed |"
    assert "| 85.2–98.5 (001 Table 4) |" in table and "76.3 (001 §6.1.1)" in table  # the seeds' figures beside ours


def test_the_metadata_table_says_what_the_metadata_page_says() -> None:
    names = ("metadata", "metadata-iid", "metadata-equal")
    rows = {name: json.loads((results.DATA / f"{name}.json").read_text())["rows"][0] for name in names}
    assert rows["metadata"]["metadata"] > 5 and rows["metadata-iid"]["metadata"] > 5  # the example count is a name tag ...
    assert rows["metadata-equal"]["metadata"] < 1.5  # ... that carries nothing when sizes are equal
    assert rows["metadata-iid"]["weights"] < 2  # the weights are near chance on the IID control
    assert all(r["linkage"]["w"] > 10 for r in rows.values())  # linkage from Δw needs no prior
    text = results.render("metadata,metadata-iid,metadata-equal")
    assert text.count(".venv/bin/leakbed run metadata") == 3 and text.count("(40 users, 160 updates)") == 3


def test_the_property_table_says_what_its_page_says() -> None:
    def rows(name: str) -> list[dict]:
        return json.loads((results.DATA / f"{name}.json").read_text())["rows"]

    (fedsgd,), (femnist,), (secagg,) = rows("property"), rows("femnist-property"), rows("secagg")
    assert fedsgd["auc_other"] > 0.9 > fedsgd["auc"] > 0.5  # logistic far better on single FedSGD updates
    for r in (fedsgd, femnist):  # the seed's Figure 7.4: AUC rises with the batch's property share
        assert float(r["by_share"][-1]["auc"]) > float(r["by_share"][0]["auc"]) + 0.3, r["by_share"]
    assert min(float(femnist["by_share"][-1][k]) for k in ("auc", "auc_other")) >= 0.965  # "0.97-0.98" in the text
    assert secagg["kind"] == "aggregates" and (secagg["observed"], secagg["with_property"]) == (20, 10)
    assert (round(secagg["auc"], 2), round(secagg["auc_other"], 2)) == (0.7, 0.6)  # quoted in the text
    table = results.render("property,property-fedavg,femnist-property,secagg")
    assert "| 20 aggregates, 10 with a holder | 0.70 / 0.60 |" in table


def test_the_participant_table_says_what_its_page_says() -> None:
    rows = [json.loads((results.DATA / f"active-{a}.json").read_text())["rows"][0] for a in ("1.0", "0.5", "0.2")]
    assert [r["alpha"] for r in rows] == [1.0, 0.5, 0.2]
    assert [round(r["auc"], 2) for r in rows] == [0.65, 0.63, 0.60]  # quoted in the text: modestly above chance
    assert all((r["observations"], r["positive_rounds"]) == (29, 14) for r in rows)
    assert round(rows[0]["mean_score_with"], 2) == 0.98 and round(rows[0]["mean_score_without"], 2) == 0.94


def test_the_metadata_sweeps_say_what_the_metadata_page_says() -> None:
    def points(name: str) -> dict[str, dict]:
        return {r["label"].split(".")[0]: r for r in json.loads((results.DATA / f"{name}.json").read_text())["rows"]}

    for name in ("sweep-femnist-metadata", "sweep-metadata"):
        p = points(name)
        assert p["count-constant"]["metadata"] < 1.2 < p["baseline"]["metadata"] / 5  # a constant count removes the leak
        assert p["norm-clip"]["metadata"] > 8  # clipping the norm leaves the count
        assert p["norm-clip"]["utility"] < 0.6 * p["baseline"]["utility"]  # ... at almost half the accuracy
        assert p["batching"]["utility"] == p["baseline"]["utility"]  # batching delays the tap, not FedAvg
        assert min(p[k]["linkage"]["w"] for k in ("count-bucket", "count-constant")) > 10  # no count defense stops Δw linkage
    femnist = points("sweep-femnist-metadata")
    last = femnist["batching"]  # the first "batching" row is k = 40; the last one, k = 80, wins the dict
    assert last["label"] == "batching.batch_min=80" and last["intersection"]["perfect_linking"] < 1.5
    assert last["linkage"]["w"] < 1.5  # batching breaks Δw linkage on FEMNIST


def test_the_fedavg_inversion_sweep_says_what_the_reach_map_page_says() -> None:
    rows = {r["point"]: r for r in json.loads((results.DATA / "sweep-fedavg-inversion.json").read_text())["rows"]}
    base, weak, strong = rows["baseline"], rows["dp-fedavg.noise_multiplier=0.1"], rows["dp-fedavg.noise_multiplier=1.0"]
    assert base["recovered"] >= 0.9 and base["recovered"] > base["recovered_chance"] + 0.5  # undefended: most images
    assert weak["recovered"] >= 0.5 and weak["epsilon"] > 100  # weak DP leaves most of them
    assert strong["recovered"] == 0 and strong["epsilon"] < 10 and strong["psnr"] < strong["psnr_chance"]
    assert rows["noise.variance=1e-06"]["recovered"] == 0 and rows["noise.variance=1e-06"]["utility_norm"] > 0.95
    assert all(r["label_accuracy"] >= 0.95 > max(r["label_chance"] for r in rows.values()) for r in rows.values())


def test_the_femnist_participant_tables_say_what_the_page_says() -> None:
    def auc(name: str) -> float:
        return json.loads((results.DATA / f"{name}.json").read_text())["rows"][0]["auc"]

    alphas, seeds = ("1.0", "0.5", "0.2"), (5, 6, 7)
    means = [sum(auc(f"femnist-active-{a}-s{s}") for s in seeds) / 3 for a in alphas]
    assert [round(m, 2) for m in means] == [0.68, 0.73, 0.79]  # quoted on the page; rising with the property's weight
    assert all(auc(f"femnist-active-0.2-s{s}") > auc(f"femnist-active-1.0-s{s}") for s in seeds)
    assert all(auc(f"femnist-active-own-{a}") == 0.5 for a in ("1.0", "0.5"))  # its own hand: at chance
    table = results.render("femnist-active-own-1.0,femnist-active-own-0.5")
    assert table.count("| FEMNIST, its own handwriting as auxiliary data, seed 5 |") == 2  # labelled runs get a column


def test_the_membership_table_says_what_its_page_says() -> None:
    def row(name: str) -> dict:
        return json.loads((results.DATA / f"membership-{name}.json").read_text())["rows"][0]

    words = [row(f"words-b{b}") for b in (1, 4, 16, 32)]
    assert all(r["recall"] == 1.0 and r["precision"] > 0.95 for r in words)  # near 1 up to a batch of 32
    assert 140 < words[-1]["vocab_per_update"] < 180 and words[-1]["vocab_size"] == 5000  # "about 160 of 5000"
    chars = row("chars-b16")
    assert chars["recall"] == 1.0 and round(chars["precision"], 2) == 0.67 and chars["vocab_size"] == 82


def test_the_femnist_property_seeds_say_what_the_page_says() -> None:
    names = ("femnist-property", "femnist-property-seed1", "femnist-property-seed2")
    rows = [json.loads((results.DATA / f"{n}.json").read_text())["rows"][0] for n in names]
    for r in rows:
        assert 0.795 <= min(r["auc"], r["auc_other"]) and max(r["auc"], r["auc_other"]) < 0.915  # "0.80-0.91"
        shares = r["by_share"]
        for k in ("auc", "auc_other"):
            assert 0.415 <= float(shares[0][k]) < 0.515 and 0.875 <= float(shares[-1][k]) < 0.995  # Figure 7.4


def test_the_when_and_femnist_secagg_rows_say_what_the_page_says() -> None:
    (when,) = json.loads((results.DATA / "when.json").read_text())["rows"]
    assert abs(when["auc"] - 0.5) < 0.05 and when["auc_other"] > 0.99  # forest at chance, logistic 1.00
    (femnist,) = json.loads((results.DATA / "femnist-secagg.json").read_text())["rows"]
    assert femnist["kind"] == "aggregates" and max(abs(femnist[k] - 0.5) for k in ("auc", "auc_other")) < 0.1  # chance


def test_the_femnist_sweep_says_what_the_defenses_page_says() -> None:
    rows = {r["point"]: r for r in json.loads((results.DATA / "sweep-femnist.json").read_text())["rows"]}
    base = rows["baseline"]
    assert base["mlp_x_chance"] > 2.5 and base["svm_x_chance"] > 3.5 and round(base["utility"], 2) == 0.35
    for aug in ("rand-aug", "mm-aug"):  # more utility, a third to a half less re-identification at alpha 2
        r = rows[f"{aug}.alpha=2.0"]
        assert r["utility_norm"] > 1.2
        assert all(0.45 < r[f"{a}_x_chance"] / base[f"{a}_x_chance"] < 0.7 for a in ("mlp", "svm", "knn")), r
    assert max(rows["bkg-repl.alpha=1.0"][f"{a}_x_chance"] for a in ("mlp", "svm", "knn")) < 1.1  # chance
    assert max(rows["noise.variance=0.01"][f"{a}_x_chance"] for a in ("mlp", "svm", "knn")) < 1.2
    for z in ("0.0", "0.5", "2.0"):  # DP-FedAvg keeps re-identification, the clip costs the utility
        r = rows[f"dp-fedavg.noise_multiplier={z}"]
        assert r["mlp_x_chance"] >= 1.95 and r["svm_x_chance"] >= 2.65 and r["utility_norm"] < 0.3
    assert all(abs(rows[p]["svm_x_chance"] - base["svm_x_chance"]) < 1.2 for p in rows if p.startswith("batching"))


def test_a_folder_that_is_not_a_finished_run_is_refused_in_one_line(tmp_path, capsys) -> None:
    before = sorted(results.DATA.glob("*.json"))
    for folder in (tmp_path / "missing", tmp_path):  # no such folder; a folder without a run's metrics
        code = results.main(["summarize", "membership", str(folder), "--name", "never-written", "--command", "leakbed run"])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert sorted(results.DATA.glob("*.json")) == before
