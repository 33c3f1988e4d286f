"""One preflight for every way a run starts (``leakbed run``, ``flwr run``, ``leakbed deploy-local``, a sweep).

It learns each attack the config names as a declaration (data, from a sandboxed introspection: no attack module is
ever imported here, ``workers.introspect``), checks each attack's parameters against its declaration (leakbed's
params language, ``core.param_schema``) and fills in its defaults (so the frozen ``config.toml`` states them all),
checks each defense the same way through its own registry, then checks the run against what they declare they need,
and runs the attacks' own checks (their params validators, their ``check`` hooks) in sandboxes, one per prior. A
config the run cannot serve is one line, never a federation that fails in every round.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import ValidationError

from leakbed.cluster import check_ray_address
from leakbed.core.adoption import adopters
from leakbed.core.config import ConfigError, DefenseConfig, ExperimentConfig, one_line
from leakbed.core.data import Federation, federation
from leakbed.core.declaration import Declaration, ParamsError, Setting, check_params, unmet
from leakbed.core.derive import derived_seed
from leakbed.core.entry_points import PluginError
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import attack_keys, build_model, resolve_name
from leakbed.core.multitask import check_adversary
from leakbed.core.property_plan import check_property_setup
from leakbed.defenses import registry as defense_registry
from leakbed.defenses.contract import DefenseSetting
from leakbed.referee.kinds import KINDS
from leakbed.server.memory_estimate import check_memory
from leakbed.server.plan import sampled_per_round
from leakbed.workers.checks import RunFacts, own_checks
from leakbed.workers.introspect import for_workers
from leakbed.workers.inventory import warn_once
from leakbed.workers.sandbox import Limits, available, limits_for
from leakbed.workers.tls import tls_files


def declarations(cfg: ExperimentConfig) -> dict[str, Declaration]:
    """The declarations of the suite's attacks (cached per installed distribution); ConfigError (one line) for an
    unknown attack, one that fails to load or declares itself wrongly, or one scored by a kind the referee lacks."""
    try:
        found = for_workers(cfg.workers).declarations(cfg.attack.suite)
    except PluginError as err:
        raise ConfigError(f"attack.suite: {str(err).removeprefix('attack.suite: ')}") from None
    for name, decl in found.items():
        kind = decl.scoring.kind
        if kind != "plugin" and kind not in KINDS:
            known = ", ".join(sorted(KINDS))
            raise ConfigError(f"attack.suite: {name!r} is scored by kind {kind!r}; the referee's kinds: {known}")
    return found


def resolve(cfg: ExperimentConfig, decls: dict[str, Declaration] | None = None) -> ExperimentConfig:
    """``cfg`` with every plugin it names found and its parameters checked and completed; ConfigError (one line) for
    an unknown plugin, one that fails to load, or parameters its declaration refuses."""
    decls = declarations(cfg) if decls is None else decls
    tables = {}
    for name in cfg.attack.suite:
        try:
            tables[name] = check_params(decls[name], cfg.attack.params.get(name), f"attack.params.{name}")
        except ParamsError as err:
            raise ConfigError(str(err)) from None
    defenses = []
    for i, entry in enumerate(cfg.defenses):
        try:
            params = defense_registry.params_of(entry).model_dump(mode="json")
        except defense_registry.PluginError as err:
            raise ConfigError(f"defenses.{i}: {err}") from None
        except ValidationError as err:  # an unknown parameter gets the closest one and the list of valid ones
            model = defense_registry.defense(entry.name).params
            raise ConfigError(one_line(err, f"defenses.{i} ({entry.name})", model, list_all=True)) from None
        defenses.append(DefenseConfig(name=entry.name, fraction=entry.fraction, users=entry.users, **params))
    return cfg.model_copy(update={"attack": cfg.attack.model_copy(update={"params": tables}), "defenses": defenses})


def preflight(cfg: ExperimentConfig, priors: list[str] | None = None) -> ExperimentConfig:
    """The resolved config (``resolve``) once every prior's federation (or those of ``priors``) loads and the model
    builds, and every attack, defense, adversary and property plan can run on them; ConfigError, DataError or
    ValueError (one line) otherwise."""
    warn_once()  # an installed plugin whose .pth runs code at every start: that code is outside any sandbox
    if cfg.workers.addresses:
        tls_files(cfg.workers)  # the pool's mutual-TLS files: a missing one is refused now, not when the pool starts
    else:
        limits_for(cfg.workers)  # workers.sandbox = 'on' where no sandbox can start: refused now, not mid-run
    decls = declarations(cfg)
    cfg = resolve(cfg, decls)
    check_ray_address(cfg)  # simulation.ray_address: a cluster that does not answer stops here, not in Ray's retries
    own: dict[str, tuple[AttackerKnowledge, RunFacts]] = {}
    first: Federation | None = None  # kept for the memory estimate (any prior's: they run one after another)
    for rule in cfg.split.priors if priors is None else priors:
        fed = federation(cfg, rule)
        first = first or fed
        own[rule] = check_prior(cfg, fed, decls)
    try:
        tables = own_checks(decls, dict(cfg.attack.params), own, *check_sandbox(cfg))
    except ParamsError as err:
        raise ConfigError(str(err)) from None
    cfg = cfg.model_copy(update={"attack": cfg.attack.model_copy(update={"params": tables})})
    if first is not None:  # a run that cannot fit this machine is refused now
        check_memory(cfg, first, decls)
    return cfg


def check_sandbox(cfg: ExperimentConfig) -> tuple[Limits | None, str]:
    """Where the attacks' own checks run: always on this host, remote workers or not (they need the priors' data,
    which leakbed holds here), in a sandbox where one can start; otherwise why none can, unless the run said
    ``workers.sandbox = 'off'`` (then no reason: the report states it)."""
    if cfg.workers.sandbox == "off":
        return None, ""
    why = available()
    if why:
        return None, why
    return limits_for(cfg.workers.model_copy(update={"sandbox": "auto"}))[0], ""


def check_prior(cfg: ExperimentConfig, fed: Federation, decls: dict[str, Declaration]) -> tuple[AttackerKnowledge, RunFacts]:
    """Everything one prior's federation must serve: the attacks' declared needs, the defenses' compatibility, who
    adopts them, an adversarial participant, a property plan, and a shuffler batch the run can fill. Returns what
    the attacks' own checks see of it."""
    model = build_model(cfg.model, fed.corpus)
    keys = attack_keys(model, cfg.model.attack_layers)
    state = model.state_dict()
    secagg = cfg.fl.secure_aggregation == "secagg+"
    facts = RunFacts(
        source=f"data.source {cfg.data.source!r} ({fed.corpus.name})",
        model=resolve_name(cfg.model, fed.corpus),
        parameters=tuple(state),
        optimizer=cfg.fl.optimizer,
        momentum=cfg.fl.momentum,
        local_steps=cfg.fl.local_steps,
        secure_aggregation=secagg,
    )
    setting = Setting(corpus=fed.corpus, prior=fed.prior(), **vars(facts))
    for name in cfg.attack.suite:
        why = unmet(decls[name], setting)
        if why:
            raise ConfigError(why)
    ints = [k for k, v in state.items() if not v.is_floating_point()]
    dsetting = DefenseSetting(fed.corpus, float_state=not ints, integer_buffer=ints[0] if ints else "", secure_aggregation=secagg)
    for i, entry in enumerate(cfg.defenses):
        why = defense_registry.defense(entry.name).check(defense_registry.params_of(entry), dsetting)
        if why:
            raise ConfigError(f"defenses.{i}: {why}")
        adopters(entry, i, fed.user_ids, cfg.seed)  # named adopters must be users of the federation
    check_adversary(cfg, fed)
    check_property_setup(cfg.data.property_plan, cfg.seed, {u: fed.private(i) for i, u in enumerate(fed.user_ids)})
    total = cfg.fl.rounds * sampled_per_round(cfg, len(fed.user_ids))
    if cfg.shuffler.batch_min > total:
        raise ConfigError(
            f"shuffler.batch_min {cfg.shuffler.batch_min} exceeds the run's {total} updates (rounds x devices per round): "
            "the shuffler would never release one"
        )
    knowledge = AttackerKnowledge(
        prior=fed.prior(), corpus_meta=replace(fed.corpus, users={}), model=cfg.model, keys=keys,
        seed=derived_seed(cfg.seed, "attacker"), device=cfg.device, shadow_batch_users=cfg.attack.shadow_batch_users,
    )  # fmt: skip
    return knowledge, facts
