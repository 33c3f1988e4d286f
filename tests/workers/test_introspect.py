"""Attack plugins as trusted code knows them (``workers.introspect``): declarations from a sandboxed introspection,
checked by leakbed's model, cached per distribution by content; hostile introspection output refused in one line."""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from leakbed.core.declaration import Declaration
from leakbed.core.entry_points import PluginError
from leakbed.workers import introspect, one_shot, staging
from leakbed.workers.introspect import Introspector, content_key
from leakbed.workers.sandbox import Limits, Sandbox, available
from leakbed.workers.staging import stage
from tests.workers import kit

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")


def one_line(err: BaseException, limit: int = 700) -> str:
    text = str(err)
    assert "\n" not in text and "\x1b" not in text and len(text) <= limit, text
    return text


def test_the_built_in_attacks_declare_themselves_and_come_back_checked(decls):
    assert set(kit.BUILTINS) <= set(decls) and all(isinstance(d, Declaration) for d in decls.values())
    knn, mlp, meta, profile = decls["knn"], decls["mlp"], decls["metadata"], decls["profile"]
    assert (knn.name, knn.family, knn.params_defaults, knn.scoring.kind) == ("knn", "reid", {"k": 10}, "reid")
    assert knn.params.field("k").ge == 1 and knn.params.field("k").le == 1000 and knn.params.field("k").type == "int"
    assert mlp.params_defaults == {"epochs": 100} and not mlp.validates and not mlp.on_round
    assert meta.builds_on == ("family:reid",) and meta.upstream(["knn", "metadata", "svm"], decls) == ["knn", "svm"]
    assert profile.validates and profile.on_round and decls["membership"].validates and decls["attributes"].validates
    assert decls["membership"].needs.modality == "text" and decls["membership"].needs.full_updates
    assert {d.distribution for d in decls.values()} == {"leakbed"} and {d.version for d in decls.values()} == {version("leakbed")}


@pytest.mark.slow  # one introspection of leakbed's 17 attacks in a sandbox: 5-15 s
def test_a_second_call_hits_the_cache(tmp_path):
    first = Introspector(Limits(), cache=tmp_path)
    t0 = time.monotonic()
    cold = first.declarations(["knn", "svm"])
    miss = time.monotonic() - t0
    assert first.misses == 1 and first.seconds > 0
    second = Introspector(Limits(), cache=tmp_path)
    t0 = time.monotonic()
    warm = second.declarations(["knn", "svm", "mlp"])  # another member of the same distribution: cached with it
    hit = time.monotonic() - t0
    print(f"declarations: cache miss (a sandboxed introspection) {miss:.2f} s, cache hit {hit:.3f} s")
    assert second.misses == 0 and second.seconds == 0 and warm["knn"] == cold["knn"] and warm["svm"] == cold["svm"]
    assert hit < miss / 5, (hit, miss)
    cached = list(tmp_path.glob("leakbed-*.json"))
    assert len(cached) == 1 and set(json.loads(cached[0].read_text())["declarations"]) >= set(kit.BUILTINS)


def test_a_changed_distribution_is_introspected_again(tmp_path, decls, monkeypatch):
    """The cache is keyed by the distribution's content: the same key reads the cache, a new key (a changed plugin)
    introspects again."""
    calls: list[list[str]] = []
    doc = {"declarations": {n: d.model_dump(mode="json") for n, d in decls.items()}, "errors": {}}
    members = sorted(ep.name for ep in entry_points(group="leakbed.attacks") if ep.dist and ep.dist.name == "leakbed")
    for name in members:
        doc["declarations"].setdefault(name, decls["knn"].model_copy(update={"name": name}).model_dump(mode="json"))

    def run(self, names):  # noqa: ANN001, ANN202 - the sandboxed introspection, counted
        calls.append(names)
        return json.dumps(doc).encode()

    monkeypatch.setattr(Introspector, "_run", run)
    key = ["k1"]
    monkeypatch.setattr(introspect, "content_key", lambda dist, eps: key[0])
    one = Introspector(Limits(), cache=tmp_path)
    one.declarations(["knn"])
    one.declarations(["knn"])
    assert one.misses == 1 and len(calls) == 1 and calls[0] == members  # a distribution's members together
    key[0] = "k2"  # the plugin changed
    again = Introspector(Limits(), cache=tmp_path)
    assert again.declarations(["knn"])["knn"] == decls["knn"] and again.misses == 1 and len(calls) == 2
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["leakbed-k1.json", "leakbed-k2.json"]


def fake_plugin(root: Path, body: str, name: str = "lbfake", eps: str = "lb-fake = lbfake.attack:Fake") -> Path:
    """A distribution on ``sys.path`` that publishes attacks (found by entry point, never imported here)."""
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    if body:
        (pkg / "attack.py").write_text(body)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[leakbed.attacks]\n{eps}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{name}/attack.py,,\n")
    return root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """leakbed's cache of this test (its staged code and declarations)."""
    monkeypatch.setenv("LEAKBED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_content_key_follows_the_plugins_files(tmp_path, monkeypatch, cache):
    """Editing a development install's source (its version unchanged) changes the key; the same content keeps it."""
    fake_plugin(tmp_path, "X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = next(ep for ep in entry_points(group="leakbed.attacks") if ep.name == "lb-fake")
    assert "lbfake" not in sys.modules  # found, not imported
    before = content_key(stage(ep.dist), [ep])
    assert content_key(stage(ep.dist), [ep]) == before
    (tmp_path / "lbfake" / "attack.py").write_text("X = 2\n")
    after = content_key(stage(ep.dist), [ep])
    assert after != before and len(after) == 32
    (tmp_path / "lbfake" / "attack.py").write_text("X = 1\n")
    assert content_key(stage(ep.dist), [ep]) == before


def test_leakbeds_own_attack_code_is_part_of_every_key(tmp_path, monkeypatch, cache):
    code = tmp_path / "attacks"
    code.mkdir()
    (code / "a.py").write_text("A = 1\n")
    monkeypatch.setattr(staging, "code_paths", lambda: [code])
    ep = next(ep for ep in entry_points(group="leakbed.attacks") if ep.name == "knn")
    before = content_key(introspect.staged_code(ep), [ep])
    (code / "a.py").write_text("A = 2\n")
    assert content_key(introspect.staged_code(ep), [ep]) != before


TWIN = """
from leakbed.plugin import Attack, NoParams


class Twin(Attack):
    name = "knn"
    family = "reid"
    params = NoParams
    scorer = "reid"
    source = "a second distribution publishing a built-in's name"

    def fit(self, ctx):
        pass

    def predict(self, ctx):
        return {}
"""


@pytest.mark.long
def test_a_name_two_distributions_publish_is_refused_only_when_selected_bare(tmp_path, monkeypatch, cache):
    """A second distribution publishing ``knn``: selecting ``knn`` names both and how to pick one; ``svm`` and
    ``leakbed:knn`` are not affected; ``lbtwin:knn`` selects the twin (introspected in a sandbox from its staged
    copy); an unknown distribution is named."""
    fake_plugin(tmp_path, TWIN, name="lbtwin", eps="knn = lbtwin.attack:Twin")
    monkeypatch.syspath_prepend(str(tmp_path))
    intro = Introspector(Limits(), cache=cache / "declarations")
    with pytest.raises(PluginError) as err:
        intro.declarations(["svm", "knn"])
    assert one_line(err.value) == ("attack 'knn' is published twice: by lbtwin (lbtwin.attack:Twin), leakbed "
                                   "(leakbed.attacks.reidentify:KNN); select one as 'lbtwin:knn' or 'leakbed:knn'")
    got = intro.declarations(["svm", "leakbed:knn", "lbtwin:knn"])
    assert (got["leakbed:knn"].name, got["leakbed:knn"].distribution) == ("knn", "leakbed")
    assert (got["lbtwin:knn"].name, got["lbtwin:knn"].distribution, got["lbtwin:knn"].source) == (
        "knn", "lbtwin", "a second distribution publishing a built-in's name")
    assert got["svm"].distribution == "leakbed" and "lbtwin" not in sys.modules  # introspected in a sandbox
    with pytest.raises(PluginError, match=r"^unknown attack 'knn' by distribution 'nope'$"):
        intro.declarations(["nope:knn"])


def test_an_entry_point_whose_module_is_not_its_distributions_own_is_refused(tmp_path, monkeypatch, cache):
    """A module of another distribution (leakbed's referee, the standard library) is never imported for it."""
    fake_plugin(tmp_path, "X = 1\n", name="lbforeign",
                eps="lb-referee = leakbed.referee.truth:Referee\nlb-os = os:getcwd")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(Introspector, "_run", lambda self, names: pytest.fail(f"introspected {names}"))
    intro = Introspector(Limits(), cache=cache / "declarations")
    for name, module in (("lb-referee", "leakbed.referee.truth"), ("lb-os", "os")):
        with pytest.raises(PluginError) as err:
            intro.declarations([name])
        assert one_line(err.value).startswith(f"attack {name!r} (") and one_line(err.value).endswith(
            f"is refused: its module {module!r} is not among the files of distribution 'lbforeign'")


def test_a_module_file_that_is_a_link_is_left_out_and_its_attack_refused(tmp_path, monkeypatch, cache):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    fake_plugin(tmp_path / "site", "", name="lblink", eps="lb-link = lblink.attack:X")
    (tmp_path / "site" / "lblink" / "attack.py").symlink_to(secret)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(Introspector, "_run", lambda self, names: pytest.fail(f"introspected {names}"))
    with pytest.raises(PluginError) as err:
        Introspector(Limits(), cache=cache / "declarations").declarations(["lb-link"])
    assert one_line(err.value).endswith("is refused: its module 'lblink.attack' is not among the files of distribution "
                                        "'lblink' (lblink/attack.py: a link or through one)")
    staged = [p for p in (cache / "staging").rglob("*") if p.is_file()]
    assert staged and not any("host secret" in p.read_text(errors="replace") for p in staged)


def test_without_a_sandbox_a_third_party_attack_is_refused_and_a_built_in_runs(tmp_path, monkeypatch, cache):
    from leakbed.core.config import WorkersConfig

    fake_plugin(tmp_path, "X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("leakbed.workers.sandbox.available", lambda: "bwrap not found (Debian: apt-get install bubblewrap)")
    monkeypatch.setattr(introspect, "cache_dir", lambda: cache / "declarations")
    auto = introspect.for_workers(WorkersConfig(sandbox="auto"))
    assert auto.limits is None and auto.unconfined
    with pytest.raises(PluginError) as err:
        auto.declarations(["knn", "lb-fake"])
    assert one_line(err.value) == (
        "attack 'lb-fake' comes from the third-party distribution 'lbfake' and no sandbox can start here (bwrap not "
        "found (Debian: apt-get install bubblewrap)): install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; "
        'Fedora: dnf install bubblewrap), or set workers.sandbox = "off" to run it unconfined (the report then says so)')
    off = introspect.for_workers(WorkersConfig(sandbox="off"))
    assert off.limits is None and not off.unconfined  # the user chose: no refusal


@pytest.mark.parametrize(("name", "hint"), [("knnn", "; did you mean 'knn'?"), ("mlpp", "; did you mean 'mlp'?"),
                                            ("zzzzzz", "")])
def test_an_unknown_attack_is_refused_with_the_closest_name(tmp_path, monkeypatch, name, hint):
    monkeypatch.setattr(Introspector, "_run", lambda self, names: pytest.fail("introspected an unknown attack"))
    with pytest.raises(PluginError) as err:
        Introspector(Limits(), cache=tmp_path).declarations(["knn", name])
    text = one_line(err.value, 2000)
    assert text.startswith(f"unknown attack {name!r}{hint} (known: ") and "knn" in text


def hostile(monkeypatch: pytest.MonkeyPatch, raw: bytes | str) -> None:
    data = raw.encode() if isinstance(raw, str) else raw
    monkeypatch.setattr(Introspector, "_run", lambda self, names: data)


def members() -> list[str]:
    return sorted(ep.name for ep in entry_points(group="leakbed.attacks") if ep.dist and ep.dist.name == "leakbed")


def test_the_distribution_is_the_trusted_sides_word_not_the_plugins(tmp_path, decls, monkeypatch):
    doc = {"declarations": {}, "errors": {}}
    for name in members():
        base = decls.get(name, decls["knn"]).model_dump(mode="json")
        doc["declarations"][name] = {**base, "name": name, "distribution": "leakbed-evil", "version": "999"}
    hostile(monkeypatch, json.dumps(doc))
    got = Introspector(Limits(), cache=tmp_path).declarations(["knn"])["knn"]
    assert (got.distribution, got.version) == ("leakbed", version("leakbed"))


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "the introspection of .* returned no declaration: "),
        (b"\x1b[2Jnot json\nleakbed: all fine", "the introspection of .* returned no declaration: "),
        (b"[1, 2]", "the introspection of .* returned no declaration$"),
        (b'{"declarations": [], "errors": {}}', "returned no declaration$"),
        (b'{"declarations": {}, "errors": {}}', "^the introspection did not declare 'aggregate-property'$"),
        (b"[" * 100 + b"]" * 100, "returned no declaration: "),
        (b'{"declarations": {}, "errors": {}, "x": ' + b"1" * 5_000_000 + b"}", "returned no declaration: "),
        (b'{"declarations": {}, "errors": {}, "x": NaN}', "returned no declaration: "),
    ],
    ids=["empty", "not-json", "a-list", "no-dict", "undeclared", "deep", "huge", "nan"],
)
def test_malformed_introspection_output_is_refused_in_one_line(tmp_path, monkeypatch, raw, says):
    hostile(monkeypatch, raw)
    with pytest.raises(PluginError, match=says) as err:
        Introspector(Limits(), cache=tmp_path).declarations(["knn"])
    one_line(err.value)
    assert not list(tmp_path.glob("*.json"))  # nothing cached


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"name": "svm"}, "attack 'knn' declares the name 'svm'"),
        ({"family": "root"}, "attack 'knn' declares itself wrongly: family: "),
        ({"extra": 1}, "attack 'knn' declares itself wrongly: extra: Extra inputs are not permitted"),
        ({"source": "x" * 5000}, "attack 'knn' declares itself wrongly: source: String should have at most 2000"),
        ({"params": {"$ref": "http://127.0.0.1:9/x"}}, "attack 'knn' declares itself wrongly: params.\\$ref: Extra inputs "),
        ({"scoring": {"kind": "plugin"}}, "attack 'knn' declares itself wrongly: scoring: "),
        ({"scoring": {"kind": "reid", "truth": ["user_id"]}},
         "attack 'knn' declares itself wrongly: scoring: Value error, only kind 'plugin' declares truth fields$"),
    ],
    ids=["name", "family", "extra", "long", "schema", "no-function", "truth"],
)
def test_a_declaration_leakbeds_model_refuses_fails_that_attack_only(tmp_path, decls, monkeypatch, change, says):
    doc = {"declarations": {}, "errors": {}}
    for name in members():
        doc["declarations"][name] = {**decls.get(name, decls["knn"]).model_dump(mode="json"), "name": name}
    doc["declarations"]["knn"] |= change
    hostile(monkeypatch, json.dumps(doc))
    intro = Introspector(Limits(), cache=tmp_path)
    with pytest.raises(PluginError, match=f"^attack 'knn' \\(leakbed.attacks.reidentify:KNN\\) failed to load: {says}") as err:
        intro.declarations(["knn"])
    one_line(err.value)
    assert intro.declarations(["svm"])["svm"].name == "svm" and intro.misses == 1  # the others are fine, cached


def test_a_plugin_that_fails_to_load_is_named_in_one_line(tmp_path, decls, monkeypatch):
    doc = {"declarations": {n: {**decls.get(n, decls["knn"]).model_dump(mode="json"), "name": n} for n in members()},
           "errors": {"knn": "ImportError: \x1b[31mno module\nleakbed: fine"}}
    del doc["declarations"]["knn"]
    hostile(monkeypatch, json.dumps(doc))
    with pytest.raises(PluginError, match=r"^attack 'knn' \(leakbed.attacks.reidentify:KNN\) failed to load: ImportError: "
                                          r"no module leakbed: fine$") as err:
        Introspector(Limits(), cache=tmp_path).declarations(["knn"])
    one_line(err.value)


def test_an_introspection_past_its_deadline_is_ended_and_refused(tmp_path, monkeypatch):
    """A plugin whose import hangs: the introspection is ended at the deadline (here 1 s), not waited for."""
    monkeypatch.setattr(introspect, "DEADLINE", 1.0)
    popen = Sandbox.popen

    def hang(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202 - its pipe stays open, nothing is written
        return popen(self, [command[0], "-c", "import time; time.sleep(600)"], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", hang)
    t0 = time.monotonic()
    with pytest.raises(PluginError, match=r"^the introspection did not finish within 1 s; it was ended$"):
        Introspector(Limits(), cache=tmp_path).declarations(["knn"])
    took = time.monotonic() - t0
    assert took < 6, took  # ended at once, not after a grace
    print(f"a hanging introspection with a deadline of 1 s was refused after {took:.2f} s")


def test_an_introspection_that_writes_too_much_is_ended(tmp_path, monkeypatch):
    monkeypatch.setattr(introspect, "MAX_JSON", 1 << 16)
    popen = Sandbox.popen
    flood = ("import os, sys, time\nfd = int(sys.argv[sys.argv.index('--out') + 1])\n"
             "os.write(fd, b' ' * (1 << 20))\ntime.sleep(600)")

    def write_too_much(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202
        return popen(self, [command[0], "-c", flood, *command[3:]], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", write_too_much)
    t0 = time.monotonic()
    with pytest.raises(PluginError, match=r"^the introspection wrote more than 65536 bytes; it was ended$"):
        Introspector(Limits(), cache=tmp_path).declarations(["knn"])
    assert time.monotonic() - t0 < 6


@pytest.mark.slow  # an unsandboxed introspection of leakbed's 17 attacks: 5-15 s
def test_without_a_sandbox_it_still_runs_in_a_process_of_its_own(tmp_path, monkeypatch):
    """``limits`` None (workers.sandbox off): the introspection runs as a subprocess, never in this process."""
    seen: list[list[str]] = []
    import subprocess

    popen = subprocess.Popen

    def spy(argv, *a, **kw):  # noqa: ANN001, ANN202
        seen.append(list(argv))
        return popen(argv, *a, **kw)

    monkeypatch.setattr(one_shot.subprocess, "Popen", spy)
    before = set(sys.modules)
    got = Introspector(None, cache=tmp_path).declarations(["knn"])
    assert got["knn"].name == "knn" and seen and seen[0][1:3] == ["-m", "leakbed.workers.inside.introspect"]
    assert "leakbed.attacks.reidentify" not in sys.modules or "leakbed.attacks.reidentify" in before
