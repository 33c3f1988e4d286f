"""The attacks' own checks before a run starts (``workers.checks.own_checks``): their params models' validators and
``check`` hooks run in sandboxes, one per prior, each seeing that prior's knowledge only (or, where no attack has a
hook, none), and come back as normalised parameters (checked again against the declaration, and the same for every
prior) or one line."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from dataclasses import replace

import pytest

from leakbed.core.declaration import ParamsError
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.workers import checks
from leakbed.workers.checks import RunFacts, own_checks
from leakbed.workers.sandbox import Limits, Sandbox, available
from tests.workers import kit

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")


def facts(**change) -> RunFacts:
    _, arrays, _ = kit.knowledge()
    base = {"source": "data.source 'synthetic' (synthetic)", "model": "cnn", "parameters": tuple(arrays),
            "optimizer": "sgd", "momentum": 0.0, "local_steps": 0, "secure_aggregation": False}
    return RunFacts(**{**base, **change})


def priors(**change) -> dict:
    knowledge, _, _ = kit.knowledge()
    return {"random": (knowledge, facts(**change))}


@functools.cache
def chrono() -> AttackerKnowledge:
    """The tiny federation's chrono prior: the same users as the random prior's, other examples."""
    from leakbed.core.data import federation
    from tests.conftest import tiny_config

    fed = federation(tiny_config(), "chrono")
    return replace(kit.knowledge()[0], prior=fed.prior())


def two_priors() -> dict:
    return {"random": (kit.knowledge()[0], facts()), "chrono": (chrono(), facts())}


def digest(knowledge: AttackerKnowledge) -> str:
    """What a hostile check could carry of a prior: a digest of its examples' labels."""
    return hashlib.sha256(b"".join(knowledge.prior[u].y.tobytes() for u in sorted(knowledge.prior))).hexdigest()[:16]


def one_line(err: BaseException, limit: int = 600) -> str:
    text = str(err)
    assert "\n" not in text and "\x1b" not in text and len(text) <= limit, text
    return text


@pytest.mark.slow  # one sandbox importing the attacks (torch): 5-10 s
def test_checks_run_in_a_sandbox_and_return_normalised_params(decls):
    """``profile`` (a check hook) and ``attributes`` pass on the tiny federation; each comes back as its own model
    made it: every default filled in, 2.0 as the integer 2."""
    tables = {"profile": {"target_class": 2.0}, "attributes": {}, "knn": {"k": 3}}
    t0 = time.monotonic()
    out = own_checks(decls, tables, priors(), Limits())
    print(f"the attacks' own checks in a sandbox: {time.monotonic() - t0:.2f} s")
    assert out["profile"] == {**decls["profile"].params_defaults, "target_class": 2}
    assert type(out["profile"]["target_class"]) is int
    assert out["attributes"] == decls["attributes"].params_defaults
    assert out["knn"] == {"k": 3}  # declares no checks of its own: passed through, never sent to a sandbox


@pytest.mark.slow  # one sandbox importing the attacks (torch): 5-10 s
def test_each_attacks_own_check_refuses_in_one_line_and_the_first_refusal_stops_the_run(decls, monkeypatch):
    """One sandbox per prior checks every attack that declares checks; each refusal is one line of its own, and the
    run is refused with the first (in the suite's order)."""
    replies: list[dict] = []
    reply = checks._reply
    monkeypatch.setattr(checks, "_reply", lambda raw: replies.append(reply(raw)) or replies[-1])
    tables = {"knn": {}, "attributes": {"columns": ["shoe-size"]}, "profile": {"target_class": 99}, "membership": {},
              "feature-inference": {"steps": 0, "init": "random"}}
    with pytest.raises(ParamsError) as err:
        own_checks(decls, tables, priors(), Limits())
    errors = replies[0]["errors"]
    assert len(replies) == 1 and sorted(errors) == ["attributes", "feature-inference", "membership", "profile"]
    assert not replies[0]["params"]
    expected = {
        "attributes": r"^attack.params.attributes.columns: attribute column 'shoe-size' is not in every user's data; "
                      r"have \['album', 'interest', 'property', 'tone'\]$",
        "profile": r"^attack.params.profile.target_class = 99: data.source 'synthetic' \(synthetic\) has classes 0..9$",
        "membership": r"^attack.suite 'membership' needs a text model with a token embedding \(lstm-lm / lstm-classifier\)$",
        "feature-inference": r"^attack.params.feature-inference: steps = 0 keeps the closed-form features, so init must be "
                             r"'analytic' or 'per-sample'$",
    }
    for name, says in expected.items():
        assert re.match(says, errors[name]), (name, errors[name])
    assert str(err.value) == errors["attributes"]  # the first of the suite's refusals
    one_line(err.value)


def test_attacks_without_checks_of_their_own_need_no_sandbox(decls, monkeypatch):
    monkeypatch.setattr(checks, "_run", lambda *a: pytest.fail("a sandbox was started"))
    tables = {"knn": {"k": 3}, "mlp": {"epochs": 7}}
    assert own_checks(decls, tables, priors(), Limits()) == tables


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", r"^the attacks' own checks returned nothing usable \("),
        (b"\x1b[2J{not json\nleakbed: ok", r"^the attacks' own checks returned nothing usable \("),
        (b'{"ok": true}', r"^the attacks' own checks returned nothing usable$"),
        (b'{"ok": false, "error": "\\u001b[31mboom\\nleakbed: all attacks pass"}',
         r"^the attacks' own checks failed: boom leakbed: all attacks pass$"),
        (b'{"ok": true, "params": {}, "errors": {}}', r"^attack.params.profile: its own check returned no parameters$"),
        (b'{"ok": true, "params": {"profile": {"target_class": -5}}, "errors": {}}',
         r"^attack.params.profile.target_class: -5 is less than the minimum of 0$"),
        (b'{"ok": true, "params": {"profile": {"target_class": 1, "backdoor": 1}}, "errors": {}}',
         r"^attack.params.profile.backdoor: unknown parameter of 'profile'"),
        (b'{"ok": true, "params": {"profile": {"top_k": "\\u001b]0;x\\u0007"}}, "errors": {}}',
         r"^attack.params.profile.top_k: expected an integer, got a string$"),
        (b'{"ok": true, "params": {"profile": {"target_class": 1e400}}, "errors": {}}',
         r"^the attacks' own checks returned nothing usable \("),
        (b'{"ok": true, "params": {}, "errors": {"profile": "\\u001b[2Jline one\\nline two"}}', r"^line one line two$"),
        (b"[" * 200 + b"]" * 200, r"^the attacks' own checks returned nothing usable \("),
    ],
    ids=["empty", "not-json", "no-params", "failed", "missing", "out-of-bounds", "unknown-key", "wrong-type", "inf",
         "refused", "deep"],
)
def test_a_hostile_reply_is_refused_and_what_it_normalised_is_checked_again(decls, monkeypatch, raw, says):
    """What comes back from the sandbox is hostile data: bounded, parsed by leakbed's reader, and the normalised
    params are checked again against the declaration (the sandbox cannot widen them)."""
    monkeypatch.setattr(checks, "_run", lambda inputs, limits: raw)
    with pytest.raises(ParamsError, match=says) as err:
        own_checks(decls, {"profile": {}}, priors(), Limits())
    one_line(err.value)


def test_a_check_past_its_deadline_is_ended_and_refused(decls, monkeypatch):
    monkeypatch.setattr(checks, "DEADLINE", 1.0)
    popen = Sandbox.popen

    def hang(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202 - its pipe stays open, nothing is written
        return popen(self, [command[0], "-c", "import time; time.sleep(600)"], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", hang)
    t0 = time.monotonic()
    with pytest.raises(ParamsError, match=r"^the attacks' own checks did not finish within 1 s; it was ended$"):
        own_checks(decls, {"profile": {}}, priors(), Limits())
    took = time.monotonic() - t0
    assert took < 6, took
    print(f"a hanging check with a deadline of 1 s was refused after {took:.2f} s")


def test_a_reply_past_its_size_is_ended_and_refused(decls, monkeypatch):
    """A check writing more than ``MAX_REPLY`` bytes is ended once it has: its reply is never read whole."""
    popen = Sandbox.popen
    flood = ("import os, sys\nfd = int(sys.argv[sys.argv.index('--out') + 1])\n"
             "while True:\n    os.write(fd, b'{' * 65536)\n")

    def spill(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202
        return popen(self, [command[0], "-c", flood, *command[3:]], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", spill)
    with pytest.raises(ParamsError, match=rf"^the attacks' own checks wrote more than {checks.MAX_REPLY} bytes; it was ended$"):
        own_checks(decls, {"profile": {}}, priors(), Limits())


# what a spy run in place of the check program reports: the tree it was given, whether it could write there, its
# request, and a digest of the prior data it sees (what a hostile check could carry elsewhere)
LOOK = """import hashlib, json, os, sys
fd = int(sys.argv[sys.argv.index('--out') + 1])
root = '/leakbed/inputs'
tree = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
try:
    open(root + '/request.json', 'w'); wrote = 'yes'
except OSError as err:
    wrote = err.errno
data = root + '/prior/knowledge.npz'
seen = hashlib.sha256(open(data, 'rb').read()).hexdigest()[:16] if os.path.exists(data) else ''
doc = {'ok': False, 'error': json.dumps({'tree': tree, 'wrote': wrote, 'seen': seen,
       'request': json.load(open(root + '/request.json'))})}
os.write(fd, json.dumps(doc).encode())
"""


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every sandboxed call's view (``LOOK``) and mounts, in the order the calls started."""
    seen: list[dict] = []
    popen = Sandbox.popen

    def spy(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202
        seen.append({"mounts": [str(m.inside) for m in self.mounts]})
        return popen(self, [command[0], "-c", LOOK, *command[3:]], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", spy)
    views: list[dict] = []
    reply = checks._reply

    def keep(raw: bytes) -> dict:
        try:
            return reply(raw)
        except ParamsError as err:
            views.append(json.loads(str(err).removeprefix("the attacks' own checks failed: ")))
            raise

    monkeypatch.setattr(checks, "_reply", keep)
    monkeypatch.setattr(checks, "plugin_text", lambda text, place, limit: text)  # the test reads the whole reply
    return views


def test_each_prior_is_checked_in_a_sandbox_of_its_own_that_sees_that_prior_only(decls, monkeypatch):
    """Two priors, an attack with a check hook: two sandboxed calls, each holding one prior's knowledge and the run's
    facts, read-only, and the request; the two calls saw different data (each its own prior)."""
    views = _spy(monkeypatch)
    with pytest.raises(ParamsError):
        own_checks(decls, {"profile": {"target_class": 1}, "knn": {}}, two_priors(), Limits())
    assert len(views) == 2
    for view in views:
        assert view["tree"] == ["prior/knowledge.json", "prior/knowledge.npz", "prior/setting.json", "request.json"]
        assert view["wrote"] == 30  # EROFS
    assert sorted(v["request"]["prior"] for v in views) == ["chrono", "random"]
    assert all(v["request"]["attacks"] == {"profile": {"target_class": 1}} for v in views)  # knn declares no checks
    assert views[0]["seen"] and views[1]["seen"] and views[0]["seen"] != views[1]["seen"]


def test_validators_alone_are_checked_once_without_any_prior(decls, monkeypatch):
    """``feature-inference`` has validators but no check hook: one call, which holds no prior's data at all."""
    views = _spy(monkeypatch)
    with pytest.raises(ParamsError):
        own_checks(decls, {"feature-inference": {}}, two_priors(), Limits())
    assert len(views) == 1 and views[0]["tree"] == ["request.json"] and views[0]["seen"] == ""
    assert views[0]["request"] == {"attacks": {"feature-inference": {}}, "prior": None}


def _per_prior(normalise) -> object:  # noqa: ANN001 - prior name -> the profile table its "check" returns
    def run(inputs, limits):  # noqa: ANN001, ANN202, ARG001
        rule = json.loads((inputs / "request.json").read_text())["prior"]
        return json.dumps({"ok": True, "params": {"profile": normalise(rule, inputs)}, "errors": {}}).encode()

    return run


def test_params_that_differ_between_priors_are_refused(decls, monkeypatch):
    """A check that carries what it saw of its prior into the params (here: a digest of its prior's labels, in place
    of a parameter) returns something else for each prior: refused, naming the key and both priors."""
    base = decls["profile"].params_defaults

    def carry(rule: str, inputs) -> dict:  # noqa: ANN001
        seen = AttackerKnowledge.load(inputs / "prior")
        return {**base, "top_k": 1 + int(digest(seen)[:4], 16) % 1000}

    monkeypatch.setattr(checks, "_run", _per_prior(carry))
    with pytest.raises(ParamsError) as err:
        own_checks(decls, {"profile": {}}, two_priors(), Limits())
    assert str(err.value) == ("attack.params.profile.top_k: its own check returned a different value for prior 'chrono' "
                              "than for prior 'random'; a check's parameters may not depend on the prior")
    one_line(err.value)


def test_params_the_same_for_every_prior_pass_once_checked(decls, monkeypatch):
    base = decls["profile"].params_defaults
    monkeypatch.setattr(checks, "_run", _per_prior(lambda rule, inputs: {**base, "top_k": 7.0}))
    out = own_checks(decls, {"profile": {}}, two_priors(), Limits())
    assert out["profile"] == {**base, "top_k": 7} and type(out["profile"]["top_k"]) is int


def test_a_refusal_for_one_prior_refuses_the_run(decls, monkeypatch):
    """A hook that refuses one prior's data (the first prior's reply is fine): the run is refused with its line."""
    base = decls["profile"].params_defaults

    def run(inputs, limits):  # noqa: ANN001, ANN202, ARG001
        rule = json.loads((inputs / "request.json").read_text())["prior"]
        doc = {"params": {"profile": base}, "errors": {}} if rule == "random" else \
            {"params": {}, "errors": {"profile": "attack.params.profile.target_class = 0: chrono has no class 0"}}
        return json.dumps({"ok": True, **doc}).encode()

    monkeypatch.setattr(checks, "_run", run)
    with pytest.raises(ParamsError, match=r"^attack.params.profile.target_class = 0: chrono has no class 0$"):
        own_checks(decls, {"profile": {}}, two_priors(), Limits())
