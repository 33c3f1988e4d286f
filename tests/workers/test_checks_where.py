"""Where the attacks' own checks run (``preflight.check_sandbox``): on this host, in a sandbox where one can start,
also when the attacks run on remote workers; where none can start, a third-party attack's checks are refused in one
line, never run in a plain process of the trusted side (they used to be, with ``workers.addresses`` set)."""

from __future__ import annotations

import pytest

from leakbed import preflight
from leakbed.core.declaration import ParamsError
from leakbed.workers import checks
from leakbed.workers.checks import own_checks
from leakbed.workers.sandbox import Limits, available
from tests.conftest import tiny_config


def test_a_third_party_check_is_refused_where_no_sandbox_can_start(decls, monkeypatch):
    monkeypatch.setattr(checks, "_run", lambda *a: pytest.fail("a check ran unconfined"))
    hostile = {**decls, "profile": decls["profile"].model_copy(update={"distribution": "leakbed-hostile"})}
    with pytest.raises(ParamsError) as err:
        own_checks(hostile, {"profile": {}}, {}, None, unconfined="bwrap: not found")
    text = str(err.value)
    assert "'profile'" in text and "leakbed-hostile" in text and "bubblewrap" in text and "workers.sandbox" in text
    assert "\n" not in text


def test_leakbeds_own_checks_still_run_unconfined_with_the_banner_s_reason(decls, monkeypatch):
    ran: list[object] = []
    monkeypatch.setattr(checks, "_run", lambda inputs, limits: ran.append(limits) or b"")
    monkeypatch.setattr(checks, "_reply", lambda raw: {"ok": True, "params": {"profile": {}}, "errors": {}})
    monkeypatch.setattr(checks, "check_params", lambda decl, table, where: table)
    assert own_checks(decls, {"profile": {}}, {}, None, unconfined="bwrap: not found") == {"profile": {}}
    assert ran == [None]


@pytest.mark.parametrize("addresses", [[], ["worker.example:50051"]])
def test_checks_are_sandboxed_here_with_or_without_remote_workers(addresses, monkeypatch):
    cfg = tiny_config()
    cfg = cfg.model_copy(update={"workers": cfg.workers.model_copy(update={"addresses": addresses})})
    monkeypatch.setattr(preflight, "available", lambda: "")
    limits, why = preflight.check_sandbox(cfg)
    assert isinstance(limits, Limits) and why == ""
    monkeypatch.setattr(preflight, "available", lambda: "bwrap: not found")
    assert preflight.check_sandbox(cfg) == (None, "bwrap: not found")
    off = cfg.model_copy(update={"workers": cfg.workers.model_copy(update={"sandbox": "off"})})
    assert preflight.check_sandbox(off) == (None, "")  # asked for: the report says so, nothing to refuse


def test_this_host_can_sandbox_checks() -> None:
    """The suite's machines have bubblewrap (``.ci/run`` installs it): the paths above are the real ones there."""
    if available():
        pytest.skip(f"no sandbox here: {available()}")
    assert preflight.check_sandbox(tiny_config())[0] is not None
