"""The attacks' own checks before a run starts (``workers.checks.own_checks``): their params models' validators and
``check`` hooks run in a sandbox over the attacker's knowledge and the run's facts, and come back as normalised
parameters (checked again against the declared schema) or one line."""

from __future__ import annotations

import json
import re
import time

import pytest

from leakbed.core.declaration import ParamsError
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
    """One sandbox checks every attack that declares checks; each refusal is one line of its own, and the run is
    refused with the first (in the suite's order)."""
    replies: list[dict] = []
    reply = checks._reply
    monkeypatch.setattr(checks, "_reply", lambda raw: replies.append(reply(raw)) or replies[-1])
    tables = {"knn": {}, "attributes": {"columns": ["shoe-size"]}, "profile": {"target_class": 99}, "membership": {},
              "feature-inference": {"steps": 0, "init": "random"}}
    with pytest.raises(ParamsError) as err:
        own_checks(decls, tables, priors(), Limits())
    errors = replies[0]["errors"]
    assert sorted(errors) == ["attributes", "feature-inference", "membership", "profile"] and not replies[0]["params"]
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
        (b'{"ok": true, "params": {}, "errors": {"profile": "\\u001b[2Jline one\\nline two"}}', r"^line one line two$"),
        (b"[" * 200 + b"]" * 200, r"^the attacks' own checks returned nothing usable \("),
    ],
    ids=["empty", "not-json", "no-params", "failed", "missing", "out-of-schema", "unknown-key", "refused", "deep"],
)
def test_a_hostile_reply_is_refused_and_what_it_normalised_is_checked_again(decls, monkeypatch, raw, says):
    """What comes back from the sandbox is hostile data: bounded, parsed by leakbed's reader, and the normalised
    params are checked again against the declared schema (the sandbox cannot widen them)."""
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


def test_the_checks_see_the_prior_and_the_facts_read_only(decls, monkeypatch):
    """What the sandbox is given: the request and, per prior, the knowledge and the run's facts, mounted read-only;
    nothing else of the run."""
    seen: dict = {}
    popen = Sandbox.popen
    look = ("import json, os, sys\n"
            "fd = int(sys.argv[sys.argv.index('--out') + 1])\n"
            "root = '/leakbed/inputs'\n"
            "tree = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)\n"
            "try:\n    open(root + '/request.json', 'w'); wrote = 'yes'\nexcept OSError as err:\n    wrote = err.errno\n"
            "doc = {'ok': False, 'error': json.dumps({'tree': tree, 'wrote': wrote, "
            "'request': json.load(open(root + '/request.json'))})}\n"
            "os.write(fd, json.dumps(doc).encode())\n")

    def spy(self, command, pass_fds=(), **kw):  # noqa: ANN001, ANN202
        seen["mounts"] = [str(m.inside) for m in self.mounts]
        return popen(self, [command[0], "-c", look, *command[3:]], pass_fds=pass_fds, **kw)

    monkeypatch.setattr(Sandbox, "popen", spy)
    monkeypatch.setattr(checks, "words", lambda text, limit: text)  # the test reads the whole reply
    with pytest.raises(ParamsError) as err:
        own_checks(decls, {"profile": {"target_class": 1}, "knn": {}}, priors(), Limits())
    got = json.loads(str(err.value).removeprefix("the attacks' own checks failed: "))
    assert seen["mounts"] == ["/leakbed/inputs"]
    assert got["tree"] == ["random/knowledge.json", "random/knowledge.npz", "random/setting.json", "request.json"]
    assert got["wrote"] == 30  # EROFS
    assert got["request"] == {"attacks": {"profile": {"target_class": 1}}, "priors": ["random"]}
