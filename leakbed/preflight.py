"""One preflight for every way a run starts (``leakbed run``, ``flwr run``, ``leakbed deploy-local``, a sweep).

It resolves the plugins a config names (each attack's and each defense's parameters validated by the plugin's
own model and filled with their defaults, so that the frozen ``config.toml`` states them all), then checks the
run against what they declare they need, before anything starts: a config the run cannot serve is one line,
never a federation that fails in every round.
"""

from __future__ import annotations

from pydantic import ValidationError

from attacks import registry as attack_registry
from attacks.contract import Setting
from attacks.sandbox import limits_for
from core.adoption import adopters
from core.config import ConfigError, DefenseConfig, ExperimentConfig, one_line
from core.data import Federation, federation
from core.models import attack_keys, build_model, resolve_name
from core.multitask import check_adversary
from core.property_plan import check_property_setup
from defenses import registry as defense_registry
from defenses.contract import DefenseSetting
from leakbed.cluster import check_ray_address
from server.plan import sampled_per_round
from server.run_parts import tls_files


def resolve(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with every plugin it names found and its parameters validated and completed; ConfigError (one
    line) for an unknown plugin, one that fails to load, or parameters its model refuses."""
    tables = {}
    for name in cfg.attack.suite:
        try:
            tables[name] = attack_registry.params_of(name, cfg.attack.params.get(name)).model_dump(mode="json")
        except attack_registry.PluginError as err:
            raise ConfigError(f"attack.suite: {err}") from None
        except ValidationError as err:
            raise ConfigError(one_line(err, f"attack.params.{name}")) from None
    defenses = []
    for i, entry in enumerate(cfg.defenses):
        try:
            params = defense_registry.params_of(entry).model_dump(mode="json")
        except defense_registry.PluginError as err:
            raise ConfigError(f"defenses.{i}: {err}") from None
        except ValidationError as err:
            raise ConfigError(one_line(err, f"defenses.{i} ({entry.name})")) from None
        defenses.append(DefenseConfig(name=entry.name, fraction=entry.fraction, users=entry.users, **params))
    return cfg.model_copy(update={"attack": cfg.attack.model_copy(update={"params": tables}), "defenses": defenses})


def preflight(cfg: ExperimentConfig, priors: list[str] | None = None) -> ExperimentConfig:
    """The resolved config (``resolve``) once every prior's federation (or those of ``priors``) loads and the model
    builds, and every attack, defense, adversary and property plan can run on them; ConfigError, DataError or
    ValueError (one line) otherwise."""
    cfg = resolve(cfg)
    if cfg.attack.worker_addresses:
        tls_files(cfg.attack)  # the pool's mutual-TLS files: a missing one is refused now, not when the pool starts
    else:
        limits_for(cfg.attack)  # attack.sandbox = 'on' where no sandbox can start: refused now, not mid-run
    check_ray_address(cfg)  # simulation.ray_address: a cluster that does not answer stops here, not in Ray's retries
    for rule in cfg.split.priors if priors is None else priors:
        check_prior(cfg, federation(cfg, rule))
    return cfg


def check_prior(cfg: ExperimentConfig, fed: Federation) -> None:
    """Everything one prior's federation must serve: the attacks' needs, the defenses' compatibility, who adopts
    them, an adversarial participant, a property plan, and a shuffler batch the run can fill."""
    model = build_model(cfg.model, fed.corpus)
    attack_keys(model, cfg.model.attack_layers)
    state = model.state_dict()
    secagg = cfg.fl.secure_aggregation == "secagg+"
    setting = Setting(
        source=f"data.source {cfg.data.source!r} ({fed.corpus.name})",
        corpus=fed.corpus,
        prior=fed.prior(),
        model=resolve_name(cfg.model, fed.corpus),
        parameters=tuple(state),
        optimizer=cfg.fl.optimizer,
        momentum=cfg.fl.momentum,
        local_steps=cfg.fl.local_steps,
        secure_aggregation=secagg,
    )
    for name in cfg.attack.suite:
        why = attack_registry.unmet(name, attack_registry.params_of(name, cfg.attack.params.get(name)), setting)
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
