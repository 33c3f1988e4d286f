"""Items 9 and 10 of the red team below the process level: names two distributions publish, a machine without
bubblewrap, and what ``leakbed plugins`` and a run say about what is installed.

The process-level twins (``leakbed validate`` and ``leakbed plugins`` in an environment of their own, as root and as
an ordinary user) are in ``tests/redteam/test_sandboxes.py``; here the same rules are held where they are decided:
``workers.introspect.Introspector.declarations`` (what a run's preflight asks for each name of its suite, with
``for_workers`` choosing the introspector from the run's ``[workers]`` and this machine's PATH),
``workers.inventory`` over distributions written as pip leaves them (``tests/redteam/handmade.py``), and the line the
report and metrics open with when attack code ran unconfined."""

from __future__ import annotations

import io
from collections.abc import Iterator
from importlib.metadata import Distribution, EntryPoint
from pathlib import Path

import pytest

from leakbed.core.config import WorkersConfig
from leakbed.core.entry_points import PluginError
from leakbed.report import sandbox_line
from leakbed.server.run_parts import attack_sandbox
from leakbed.workers import introspect, inventory, sandbox
from leakbed.workers.introspect import INSTALL, for_workers
from leakbed.workers.inventory import describe, render, warn_once
from tests.redteam.handmade import editable_source, install

pytestmark = pytest.mark.redteam

GROUP = "leakbed.attacks"


class _Dist:
    """What ``EntryPoint.dist`` offers the introspector: a name in its metadata."""

    def __init__(self, name: str) -> None:
        self.metadata = {"Name": name}


def _published(monkeypatch: pytest.MonkeyPatch, *eps: tuple[str, str, str]) -> list[tuple[str, str]]:
    """Publish ``(distribution, name, value)`` in ``leakbed.attacks`` beside leakbed's own, and record which
    distributions' members the introspector went on to introspect (instead of starting a sandbox)."""
    made = []
    for dist, name, value in eps:
        ep = EntryPoint(name, value, GROUP)
        vars(ep).update(dist=_Dist(dist))  # as importlib.metadata attaches an entry point's distribution
        made.append(ep)
    real = list(introspect.entry_points(group=GROUP))
    monkeypatch.setattr(introspect, "entry_points", lambda group: [*real, *made] if group == GROUP else [])
    asked: list[tuple[str, str]] = []

    def _distribution(self: introspect.Introspector, dist: str, wanted: dict[str, EntryPoint], eps: list) -> dict:
        asked.extend((dist, ep.value) for ep in wanted.values())
        return dict.fromkeys(wanted, "declared")

    monkeypatch.setattr(introspect.Introspector, "_distribution", _distribution)
    return asked


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A machine without bubblewrap: PATH holds no ``bwrap`` (and ``available()``'s cached answer is asked again)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox.available.cache_clear()
    yield
    sandbox.available.cache_clear()


TWINS = (("leakbed-hostile-twin", "knn", "leakbed_hostile_twin.twin:Twin"), ("leakbed-hostile-twin", "solo", "x:Solo"))


def test_a_name_two_distributions_publish_is_refused_only_when_selected_bare(monkeypatch):
    asked = _published(monkeypatch, *TWINS)
    intro = introspect.Introspector(None)
    assert intro.declarations(["mlp", "solo"]) == {"mlp": "declared", "solo": "declared"}  # knn not named: no refusal
    with pytest.raises(PluginError) as err:
        intro.declarations(["mlp", "knn"])
    assert str(err.value) == ("attack 'knn' is published twice: by leakbed (leakbed.attacks.reidentify:KNN), "
                              "leakbed-hostile-twin (leakbed_hostile_twin.twin:Twin); select one as 'leakbed:knn' or "
                              "'leakbed-hostile-twin:knn'")  # fmt: skip
    asked.clear()
    assert set(intro.declarations(["leakbed:knn", "leakbed-hostile-twin:knn"])) == {"leakbed:knn", "leakbed-hostile-twin:knn"}
    assert sorted(asked) == [("leakbed", "leakbed.attacks.reidentify:KNN"), ("leakbed-hostile-twin", TWINS[0][2])]
    with pytest.raises(PluginError, match=r"^unknown attack 'knn' by distribution 'nobody'$"):
        intro.declarations(["nobody:knn"])


def test_without_bubblewrap_third_party_code_is_refused_in_one_line_and_built_ins_go_on(monkeypatch, no_bwrap):
    asked = _published(monkeypatch, *TWINS)
    intro = for_workers(WorkersConfig(sandbox="auto"))
    assert intro.limits is None and "bwrap" in intro.unconfined and "not found" in intro.unconfined
    for suite in (["solo"], ["mlp", "leakbed-hostile-twin:knn"]):
        with pytest.raises(PluginError) as err:
            intro.declarations(suite)
        text = str(err.value)
        assert "\n" not in text and "third-party distribution 'leakbed-hostile-twin'" in text and text.endswith(INSTALL)
        assert "apt-get install bubblewrap" in text and 'workers.sandbox = "off"' in text
    assert asked == []  # nothing of it was introspected, not even unconfined
    assert intro.declarations(["mlp", "leakbed:knn"]) == {"mlp": "declared", "leakbed:knn": "declared"}
    assert [d for d, _ in asked] == ["leakbed", "leakbed"]
    limits, why = sandbox.limits_for(WorkersConfig(sandbox="auto"))  # the run's lanes: leakbed's own, unconfined
    assert limits is None and why == intro.unconfined
    banner = sandbox_line({"random": {"attack_sandbox": attack_sandbox(_Unsandboxed(), why)}})  # type: ignore[arg-type]
    assert banner == (f"**Warning: the attack code ran NOT SANDBOXED ({why}): attack code ran as this user, able to read "
                      "the truth.**")
    with pytest.raises(ValueError, match="workers.sandbox = 'on' but the attack sandbox cannot start here: bwrap"):
        for_workers(WorkersConfig(sandbox="on"))


class _Unsandboxed:
    """What ``attack_sandbox`` reads of a local pool whose lanes run unconfined."""

    local, sandboxed = True, False


def test_workers_sandbox_off_runs_any_plugin_and_the_report_says_so(monkeypatch, no_bwrap):
    asked = _published(monkeypatch, *TWINS)
    intro = for_workers(WorkersConfig(sandbox="off"))
    assert intro.limits is None and intro.unconfined == ""
    assert intro.declarations(["solo"]) == {"solo": "declared"} and asked == [("leakbed-hostile-twin", "x:Solo")]
    limits, why = sandbox.limits_for(WorkersConfig(sandbox="off"))
    line = attack_sandbox(_Unsandboxed(), why)  # type: ignore[arg-type]
    assert limits is None and line.startswith("NOT SANDBOXED (workers.sandbox = 'off')")
    assert sandbox_line({"random": {"attack_sandbox": line}}).startswith("**Warning: the attack code ran NOT SANDBOXED")


# --- what is installed ------------------------------------------------------------------------------------------------


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    return folder


def test_leakbed_plugins_flags_a_pth_links_and_files_outside_the_environment(site: Path, tmp_path: Path):
    pth = Distribution.at(install(site, "hostile-pth", files={"hostile_pth/__init__.py": ""}, top_level=("hostile_pth",),
                                  pth="import os; os.environ['X'] = '1'\n", entry_points={"p": "hostile_pth:A"}))  # fmt: skip
    adder = tmp_path / "adds"
    adder.mkdir()
    (adder / "sitecustomize.py").write_text("print('at every start')\n")
    custom = Distribution.at(install(site, "hostile-custom", files={"hostile_custom/__init__.py": ""}, pth=f"{adder}\n",
                                     top_level=("hostile_custom",), entry_points={"c": "hostile_custom:A"}))  # fmt: skip
    src = editable_source(tmp_path / "editable", "hostile_links", {"attack.py": "A = 1\n"})
    (src / "hostile_links" / "escape").symlink_to("/")
    linked = Distribution.at(install(site, "hostile-links", editable_src=src, top_level=("hostile_links",),
                                     entry_points={"l": "hostile_links.attack:A"}))  # fmt: skip
    clean = Distribution.at(install(site, "honest", files={"honest/__init__.py": ""}, top_level=("honest",),
                                    entry_points={"h": "honest:A"}))  # fmt: skip
    found = {d.name: d for d in map(describe, (pth, custom, linked, clean))}
    assert found["hostile-pth"].runs_at_start == ("hostile_pth-startup.pth",) and not found["hostile-pth"].editable
    assert found["hostile-custom"].runs_at_start == (str(adder / "sitecustomize.py"),)
    assert found["hostile-custom"].pth_code == () and found["hostile-custom"].pth_paths == (str(adder),)
    links = found["hostile-links"]
    assert links.editable and links.links == ("hostile_links/escape: a link",)
    assert links.outside == (str(src / "hostile_links"),) and links.runs_at_start == ()  # a path .pth runs nothing
    honest = found["honest"]
    assert not (honest.runs_at_start or honest.links or honest.outside or honest.problems or honest.pth)
    text = render(list(found.values()))
    for flag in ("  ! runs at every start, outside any sandbox: hostile_pth-startup.pth",
                 f"  ! runs at every start, outside any sandbox: {adder / 'sitecustomize.py'}",
                 "  ! link, left out of its staged copy: hostile_links/escape: a link",
                 f"  ! outside the environment: {src / 'hostile_links'}",
                 "honest 0.1\n  attacks: h = honest:A\n  defenses: none\n  no .pth file, no link, every file in the environment"):
        assert flag in text, text  # fmt: skip


def test_a_record_path_leaving_the_environment_is_flagged(site: Path):
    info = install(site, "hostile-record", files={"hostile_record/__init__.py": ""}, top_level=("hostile_record",),
                   entry_points={"r": "hostile_record:A"})  # fmt: skip
    with open(info / "RECORD", "a") as record:
        record.write("../../../../../../etc/hostile-record.conf,,\n/opt/hostile/bin/run,,\n")
    found = describe(Distribution.at(info))
    assert found.outside == ("/etc/hostile-record.conf", "/opt/hostile/bin/run")
    assert "  ! outside the environment: /etc/hostile-record.conf" in render([found])


def test_a_run_warns_once_about_each_plugin_whose_pth_runs_code(site: Path, tmp_path: Path, monkeypatch):
    dists = [install(site, "hostile-pth", files={"hostile_pth/__init__.py": ""}, top_level=("hostile_pth",),
                     pth="import os\n", entry_points={"p": "hostile_pth:A"}),
             install(site, "plain-editable", editable_src=editable_source(tmp_path, "plain", {}), top_level=("plain",),
                     entry_points={"e": "plain:A"})]  # fmt: skip
    monkeypatch.setattr(inventory, "installed", lambda links=True: [describe(Distribution.at(d), links) for d in dists])
    monkeypatch.delenv(inventory.WARNED, raising=False)
    first, again = io.StringIO(), io.StringIO()
    warn_once(first)
    warn_once(again)  # the run's own processes inherit the mark
    assert first.getvalue().splitlines() == [
        "leakbed: warning: plugin distribution 'hostile-pth' ships hostile_pth-startup.pth, which Python runs at every "
        "start, outside any sandbox (see leakbed plugins)"]  # the plain editable install's path .pth runs nothing
    assert again.getvalue() == ""
