"""One pydantic model describes a whole experiment.

Every field has a default, a bound (numeric range, literal set or length) and a unit in its
description, so a run directory's frozen ``config.toml`` fully determines the run.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from leakbed.core.errors import LeakbedError

PriorRule = Literal["random", "chrono"]
DataSource = Literal["synthetic", "leaf", "tff-hdf5", "table", "flwr-datasets"]
# Attack and defense names: plugins published under the entry-point groups leakbed.attacks and
# leakbed.defenses; the product checks a config's names against them before anything starts.
# ``distribution:name`` selects the plugin one distribution publishes (the distribution's name as pip normalizes it)
_PLUGIN_NAME = re.compile(r"(?:[a-z0-9][a-z0-9-]{0,99}:)?[a-z][a-z0-9-]{0,39}")
ModelName = Literal["auto", "cnn", "mobilenet_v3_small", "resnet18", "lstm-lm", "lstm-classifier"]


_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")
_UNIX_SOCKET = re.compile(r"unix:/[A-Za-z0-9._/\-]{1,106}")


def _distinct(items: list) -> list:
    if len(set(items)) != len(items):
        raise ValueError("must not repeat")
    return items


def _attack_names(names: list[str]) -> list[str]:
    for n in names:
        _plugin_name(n)
    return names


def _plugin_name(name: str) -> str:
    if not _PLUGIN_NAME.fullmatch(name):
        raise ValueError(f"bad plugin name {name!r}: lower-case letters, digits and '-', starting with a letter "
                         "(distribution:name selects one distribution's)")
    return name


def _worker_addresses(addresses: list[str]) -> list[str]:
    bad = [a for a in addresses if not (_HOST_PORT.fullmatch(a) or _UNIX_SOCKET.fullmatch(a))]
    if bad:
        raise ValueError(f"{bad[0]!r} is not host:port or unix:/absolute/path")
    return addresses


Distinct = AfterValidator(_distinct)  # a list field whose items must not repeat


class Section(BaseModel):
    """Strict base: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticConfig(Section):
    """The embedded generator: users with their own class preferences and capture style."""

    users: int = Field(60, ge=2, le=100_000, description="users in the population [count]")
    classes: int = Field(10, ge=2, le=1000, description="image classes [count]")
    examples_per_user: int = Field(120, ge=8, le=100_000, description="mean examples per user [count]")
    size_spread: float = Field(0.3, ge=0.0, le=2.0, description="log-normal sigma of user data sizes [1]")
    image_size: int = Field(16, ge=8, le=224, description="image height and width [pixels]")
    channels: int = Field(3, ge=1, le=3, description="image channels [count]")
    bias: float = Field(0.9, ge=0.0, le=1.0, description="selection-bias strength; 0 is the IID control [fraction]")
    style: float = Field(1.0, ge=0.0, le=5.0, description="capture-style strength, scaled by bias [multiple]")
    drift: float = Field(0.2, ge=0.0, le=1.0, description="how far class preferences drift over a user's timeline [fraction]")
    albums_per_user: int = Field(4, ge=1, le=1000, description="albums per user [count]")
    album_mix: float = Field(
        0.2, ge=0.0, le=1.0, description="share of an album's own class preferences in its examples [fraction]"
    )
    noise: float = Field(0.25, ge=0.0, le=5.0, description="pixel noise standard deviation [intensity]")
    property_rate: float = Field(0.3, ge=0.0, le=1.0, description="mean rate of the per-example binary property [fraction]")


class PropertyPlanConfig(Section):
    """Who trains on property examples, and from when (seed 002 §7.2.4 "when a property occurs", §7.2.7):
    the device leaves out the examples that hold the binary ``property`` attribute as planned here."""

    holders: list[str] = Field(
        [],
        max_length=100_000,
        description="users that train on their property examples; the others leave them out "
        "(empty: see holder_fraction) [user ids]",
    )
    holder_fraction: float = Field(
        1.0, gt=0.0, le=1.0, description="when holders is empty: seeded share of users keeping their property examples [fraction]"
    )
    onset_round: int = Field(
        0,
        ge=0,
        le=100_000,
        description="holders train without property examples before this round and on them only from it on; "
        "0 = always as drawn [round]",
    )


class DataConfig(Section):
    """Where per-user data comes from and how users are filtered."""

    source: DataSource = Field("synthetic", description="data source [name]")
    path: str = Field("", max_length=4096, description="file or folder for non-synthetic sources [path]")
    partition_by: str = Field("writer_id", max_length=128, description="natural-id column for flwr-datasets [column name]")
    synthetic: SyntheticConfig = SyntheticConfig()
    max_users: int = Field(0, ge=0, le=1_000_000, description="keep at most this many users, 0 = all [count]")
    min_examples: int = Field(20, ge=2, le=1_000_000, description="drop users with fewer examples [count]")
    seq_len: int = Field(80, ge=2, le=2048, description="text window length [tokens]")
    vocab_size: int = Field(5000, ge=10, le=200_000, description="word vocabulary size [tokens]")
    image_size: int = Field(28, ge=8, le=512, description="side of images read from paths [pixels]")
    test_fraction: float = Field(0.2, ge=0.0, le=0.9, description="per-user share held out to measure utility [fraction]")
    property_plan: PropertyPlanConfig = PropertyPlanConfig()


class SplitConfig(Section):
    """How each user's data divides into device-private data and the attacker's prior."""

    priors: Annotated[list[PriorRule], Distinct] = Field(
        ["random", "chrono"], min_length=1, max_length=2, description="prior rules, one FL run each [names]"
    )
    prior_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="share of a user's data that is prior [fraction]")
    prior_count: int = Field(0, ge=0, le=1_000_000, description="prior examples per user; >0 overrides fraction [count]")
    private_count: int = Field(
        0, ge=0, le=1_000_000, description="most examples a device trains on (a seeded pick of its share); 0 = all [count]"
    )
    chrono_row_order: Literal[False, True] = Field(
        False,
        description="let the chrono prior order by row order where the data has no timestamps (LEAF, TFF HDF5, tables "
        "without a timestamp column); off = such data refuses chrono [flag]",
    )


class ModelConfig(Section):
    """The shared model and which of its parameters represent an update for the attacks."""

    name: ModelName = Field("auto", description="architecture; auto picks by task [name]")
    attack_layers: list[str] = Field(
        ["final"],
        min_length=1,
        max_length=64,
        description="parameter-name prefixes, or 'final' for the last fully-connected layer [names]",
    )
    weights_path: str = Field("", max_length=4096, description="local pretrained state_dict, optional [path]")


class SecAggConfig(Section):
    """Flower's SecAgg+ (legacy workflow) parameters; see ``flwr.server.workflow.SecAggPlusWorkflow``."""

    num_shares: int = Field(3, ge=2, le=10_000, description="shares of each device's secret key [count]")
    reconstruction_threshold: int = Field(2, ge=2, le=10_000, description="shares needed to rebuild a secret [count]")
    clipping_range: float = Field(8.0, gt=0.0, le=1e6, description="parameters clipped to ±this [parameter value]")
    quantization_range: int = Field(4_194_304, ge=2, le=2**30, description="quantization levels [count]")
    max_weight: float = Field(1000.0, gt=0.0, le=1e9, description="largest per-device weight (num_examples) [examples]")

    @model_validator(mode="after")
    def _threshold(self) -> SecAggConfig:
        if self.reconstruction_threshold > self.num_shares:
            raise ValueError("reconstruction_threshold must not exceed num_shares")
        return self


class FLConfig(Section):
    """Federated Averaging (seed 001, Algorithm 1)."""

    rounds: int = Field(20, ge=1, le=100_000, description="FL rounds T [count]")
    fraction_train: float = Field(0.2, gt=0.0, le=1.0, description="devices sampled per round C [fraction]")
    local_epochs: int = Field(1, ge=1, le=1000, description="local epochs E [count]")
    batch_size: int = Field(16, ge=1, le=65_536, description="local batch size B [examples]")
    lr: float = Field(0.05, gt=0.0, le=10.0, description="local learning rate eta [1]")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="local optimizer [name]")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="SGD momentum [1]")
    round_timeout: float = Field(600.0, gt=0.0, le=86_400.0, description="reply timeout per round [s]")
    startup_timeout: float = Field(
        300.0, gt=0.0, le=86_400.0, description="wait this long for every device to connect before round 1, then fail [s]"
    )
    max_reply_mb: float = Field(
        0.0, ge=0.0, le=65_536.0, description="replies carrying more array data are rejected; 0 = twice the global model [MiB]"
    )
    local_steps: int = Field(
        0, ge=0, le=1_000_000, description="local batches per round; 0 = full local epochs, 1 = FedSGD-style one batch [batches]"
    )
    max_failed_share: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="a run where more of the sampled devices' replies failed or were rejected exits non-zero (keeping "
        "what it wrote): its numbers rest on too few updates [fraction]",
    )
    secure_aggregation: Literal["none", "secagg+"] = Field(
        "none", description="secagg+: Flower's SecAgg+ legacy workflow, the server sees only each round's aggregate [name]"
    )
    secagg: SecAggConfig = SecAggConfig()


class SandboxLimitsConfig(Section):
    """Resource limits of each sandbox (``workers.sandbox``): one attack cannot starve the federation, fill the
    disk or flood the run with what it writes."""

    memory: int = Field(8192, ge=256, le=1_048_576, description="heap and anonymous memory, RLIMIT_DATA (not GPU memory) [MiB]")
    processes: int = Field(
        1024, ge=64, le=1_048_576, description="processes and threads of the sandbox user, RLIMIT_NPROC [count]"
    )
    file_size: int = Field(16384, ge=1, le=16_777_216, description="largest file a sandbox may write, RLIMIT_FSIZE [MiB]")
    tmp: int = Field(1024, ge=16, le=1_048_576, description="size of its private /tmp and of its /dev/shm, each [MiB]")
    output: int = Field(
        1024, ge=1, le=1_048_576, description="disk quota of an attack's own output folder (a tmpfs of that size) [MiB]"
    )
    result: int = Field(
        256, ge=1, le=16_384, description="largest result an attack hands back, uncompressed arrays included [MiB]"
    )
    log: int = Field(
        16, ge=1, le=16_384, description="most of an attack's log kept on disk; the rest is counted, not written [MiB]"
    )


class AttackConfig(Section):
    """The attacks of a run: ``attack.suite``, each with its parameters in ``attack.params``. Core knows the attacks'
    names and their parameter tables; each table is checked against its attack's declared parameters (leakbed's params
    language), and by the attack's own model in a sandbox, before anything starts. How the attacks run is ``[workers]``."""

    suite: Annotated[list[str], AfterValidator(_attack_names), Distinct] = Field(
        ["mlp", "svm", "knn"],
        min_length=1,
        max_length=32,
        description="the attacks run in the pool, by plugin name; mlp, svm and knn are the closed-world "
        "re-identification attackers of seed 001 Table 3 [names]",
    )
    params: dict[str, dict[str, Any]] = Field(
        {},
        max_length=32,
        description="each attack's parameters under its name ([attack.params.<name>]); checked against the attack's "
        "declared parameters and frozen with its defaults into config.toml [table]",
    )
    score_every: int = Field(
        0, ge=0, le=100_000, description="score the attacks on what has arrived every N rounds; 0 = only at the end [rounds]"
    )
    shadow_batch_users: int = Field(
        64,
        ge=0,
        le=100_000,
        description="most known users whose shadow updates train together in one batched computation (fewer where "
        "core.batched_training's memory bound says so); 0 = one user at a time [users]",
    )

    @field_validator("params")
    @classmethod
    def _params_of_the_suite(cls, params: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        stray = sorted(set(params) - set(info.data.get("suite", [])))
        if stray:
            raise ValueError(f"{stray[0]!r} is not an attack of attack.suite {info.data.get('suite', [])}")
        return params


class WorkersConfig(Section):
    """How the attacks run: one sandbox per attack and prior (``leakbed/workers/``), how many run at once, their limits and
    deadlines, or the remote attack workers of a deployment and the TLS that reaches them."""

    count: int = Field(2, ge=1, le=64, description="sandboxed attack tasks running at once [count]")
    shadow_lanes: int = Field(
        0,
        ge=0,
        le=64,
        description="lanes per prior training the attacker's shadow updates, each a share of every round's known "
        "users; 0 = one per attack task running at once (count), at most this host's CPUs [lanes]",
    )
    queue_size: int = Field(256, ge=1, le=1_000_000, description="bounded tap queue [items]")
    submit_timeout: float = Field(60.0, gt=0.0, le=3600.0, description="wait for queue space before counting a drop [s]")
    addresses: Annotated[list[str], AfterValidator(_worker_addresses)] = Field(
        [],
        max_length=64,
        description="running attack workers (deployment): host:port (mutual TLS with tls_*) or unix:/path of a socket "
        "(a worker container without network); empty = sandboxes spawned on this host [addresses]",
    )
    tls_root_cert: str = Field(
        "",
        max_length=4096,
        description="the run's CA (PEM): the pool verifies remote attack workers (workers.addresses) against it and "
        "presents tls_cert, signed by it (mutual TLS); empty = plaintext gRPC; local sandboxes use pipes [path]",
    )
    tls_cert: str = Field("", max_length=4096, description="the pool's client certificate (PEM), with tls_root_cert [path]")
    tls_key: str = Field("", max_length=4096, description="the private key (PEM) of tls_cert [path]")
    retry_seconds: float = Field(
        120.0,
        gt=0.0,
        le=86_400.0,
        description="a lane's start waits this long for a remote attack worker to answer; a lane whose worker died "
        "starts again on the next one [s]",
    )
    sandbox: Literal["auto", "on", "off"] = Field(
        "auto",
        description="run attack code in the bubblewrap sandbox (leakbed/workers/sandbox.py): auto = where it can start (else "
        "unsandboxed, and the report and metrics say so first), on = refuse to run without, off = never [mode]",
    )
    limits: SandboxLimitsConfig = SandboxLimitsConfig()
    task_deadline: float = Field(
        1800.0,
        gt=0.0,
        le=604_800.0,
        description="an attack task (a round's hook, a fit) past this is ended and reported failed with 'deadline'; "
        "an attack's own budget parameter may shorten it, never lengthen it [s]",
    )
    drain_deadline: float = Field(
        1800.0, gt=0.0, le=604_800.0, description="wait at the end of the federation for the attack side to catch up [s]"
    )

    @model_validator(mode="after")
    def _mutual_tls(self) -> WorkersConfig:
        given = [bool(self.tls_root_cert), bool(self.tls_cert), bool(self.tls_key)]
        if any(given) and not all(given):
            raise ValueError("tls_root_cert, tls_cert and tls_key go together (mutual TLS with the remote workers)")
        return self


class TelemetryConfig(Section):
    """Prometheus metrics of the ServerApp, the attack workers' included (names in ``core.telemetry``)."""

    port: int = Field(0, ge=0, le=65_535, description="ServerApp /metrics port; 0 = no endpoint [port]")
    host: str = Field("127.0.0.1", min_length=1, max_length=255, description="address the /metrics endpoint listens on [host]")
    hold_seconds: float = Field(
        0.0, ge=0.0, le=86_400.0, description="keep /metrics up this long after the run so a last scrape sees the end values [s]"
    )


def _ray_address(address: str) -> str:
    if address and not _HOST_PORT.fullmatch(address):
        raise ValueError(f"{address!r} is not host:port (the head's GCS address, as `ray start --head` prints it)")
    return address


class SimulationConfig(Section):
    """Ray backend resources for the Simulation Engine, and which Ray it runs on."""

    client_cpus: int = Field(
        1, ge=1, le=256, description="CPUs per virtual client actor, whole ones (Flower's simulation config) [cores]"
    )
    client_gpus: float = Field(0.0, ge=0.0, le=8.0, description="GPUs per actor, fractions allowed [GPUs]")
    ray_address: Annotated[str, AfterValidator(_ray_address)] = Field(
        "",
        max_length=255,
        description="join the running Ray cluster whose head (GCS) listens here, placing client actors on all its "
        "nodes; run leakbed on one of its nodes; empty = a private local Ray per run [host:port]",
    )


class DefenseConfig(BaseModel):
    """One device-side defense and who adopts it (seed 001 §7: users adopt defenses selectively). Beside ``name``,
    ``fraction`` and ``users``, the entry holds the defense's own parameters (e.g. ``variance`` of noise), validated
    by the defense's parameter model (``defenses.registry``): the union of every defense's model, told apart by name."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Annotated[str, AfterValidator(_plugin_name)] = Field(
        ..., max_length=40, description="the defense, by plugin name [name]"
    )
    fraction: float = Field(1.0, gt=0.0, le=1.0, description="share of users adopting it, drawn by seed [fraction]")
    users: Annotated[list[str], Distinct] = Field(
        [], max_length=100_000, description="named adopters; when set, fraction is ignored [user ids]"
    )

    @property
    def params(self) -> dict[str, Any]:
        """The defense's own parameters, as given (validated by its plugin's model)."""
        return dict(self.model_extra or {})


class BackgroundConfig(Section):
    """Background data (the augmentation defenses; an adversarial participant's auxiliary set), preprocessed
    exactly like the users' data."""

    source: Literal["auto", "synthetic", "outside", "table"] = Field(
        "auto", description="auto = synthetic for synthetic data, else outside (the corpus' users not in the federation) [name]"
    )
    path: str = Field("", max_length=4096, description="table file for source = table [path]")
    users: int = Field(30, ge=1, le=1_000_000, description="synthetic background users / most outside users used [count]")


class ShufflerConfig(Section):
    """The shuffler as a system-level defense (seed 001 §3: it may batch reports)."""

    batch_min: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="hold anonymous updates across rounds and release them to the attacks only in batches of at "
        "least this many; 0 = every round as it comes [updates]",
    )
    reference: Literal["release", "nearest"] = Field(
        "release",
        description="the curious server's reference model for a batched update's Δw: the release round's global "
        "model, or (an adaptive attacker) the global model of the batch's rounds nearest to the update's weights [name]",
    )


class AdversaryConfig(Section):
    """Active property inference by adversarial participants (seed 002 §7.1.5): a device, not the server.

    The named users' ClientApp trains on the joint loss α·main + (1−α)·property and infers, from the
    global models it receives, whether the other participants' batches held the property; the
    referee reports it apart from the server's attacks ("participant attacks")."""

    users: Annotated[list[str], Distinct] = Field(
        [], max_length=64, description="adversarial participants by user id; empty = no participant attack [user ids]"
    )
    alpha: float = Field(
        0.5, ge=0.0, le=1.0, description="weight alpha of the main-task loss in alpha*main + (1-alpha)*property; 1 = passive [1]"
    )
    property: str = Field("property", min_length=1, max_length=64, description="binary per-example attribute inferred [name]")
    aux_batches: int = Field(
        16, ge=1, le=1000, description="auxiliary updates per label each round; half of those without it build the null [count]"
    )
    positive_fraction: float = Field(
        0.5, gt=0.0, le=1.0, description="share of property examples in an auxiliary property batch [fraction]"
    )
    aux_aggregates: int = Field(
        40, ge=2, le=10_000, description="synthetic others' aggregates composed from the auxiliary updates each round [count]"
    )
    classifier: Literal["logistic", "forest"] = Field(
        "forest", description="batch property classifier: the seed's 50-tree random forest or logistic regression [name]"
    )
    aux_source: Literal["own", "background"] = Field(
        "own",
        description="auxiliary data of the property classifier: the adversary's own labelled data, or the [background] "
        "data (e.g. writers outside the federation) with the property labelled, as the seed's auxiliary set [name]",
    )


class AuditConfig(Section):
    """The empirical privacy audit (Andrew et al., ICLR 2024; Steinke et al., NeurIPS 2023): canary clients whose
    updates are secret random directions, half of them inserted, judged from the aggregates the server releases."""

    canaries: int = Field(0, ge=0, le=4096, description="candidate canary clients, about half inserted; 0 = no audit [count]")
    rate: float = Field(
        1.0, gt=0.0, le=1.0, description="share of the inserted canaries that joins each round (fixed count) [fraction]"
    )
    norm: float = Field(
        0.0, ge=0.0, le=1e9,
        description="a canary update's L2 norm; 0 = audit.scale times the run's clipping norm (1.0 without one) [L2 norm]",
    )
    scale: float = Field(
        1e4, ge=1.0, le=1e6,
        description="with norm = 0: a canary's norm over the clipping norm, far above 1 so the clipper must act (Andrew "
        "et al.: 1e4) [ratio]",
    )
    confidence: float = Field(0.95, ge=0.5, le=0.999, description="confidence of the one-run lower bound [probability]")
    delta: float = Field(
        1e-5, gt=0.0, lt=1.0, description="delta of the estimates in a run without a DP defense [probability]"
    )


class ExperimentConfig(Section):
    """A whole experiment: data, split, model, FL, attacks and simulation resources."""

    name: str = Field("experiment", min_length=1, max_length=128, description="label for reports [text]")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="master seed for every random choice [integer]")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device; auto = CUDA when present [name]")
    data: DataConfig = DataConfig()
    split: SplitConfig = SplitConfig()
    model: ModelConfig = ModelConfig()
    fl: FLConfig = FLConfig()
    attack: AttackConfig = AttackConfig()
    workers: WorkersConfig = WorkersConfig()
    simulation: SimulationConfig = SimulationConfig()
    defenses: list[DefenseConfig] = Field([], max_length=16, description="device-side defenses, applied in order [list]")
    background: BackgroundConfig = BackgroundConfig()
    shuffler: ShufflerConfig = ShufflerConfig()
    adversary: AdversaryConfig = AdversaryConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    audit: AuditConfig = AuditConfig()

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, tree: Any) -> Any:
        return move_keys(tree) if isinstance(tree, dict) else tree

    @model_validator(mode="after")
    def _audit_path(self) -> ExperimentConfig:
        if self.audit.canaries and self.fl.secure_aggregation == "secagg+":
            raise ValueError(
                "audit.canaries needs the plain aggregation path (a canary cannot join SecAgg+'s masked sum): set "
                "audit.canaries = 0 or fl.secure_aggregation = 'none'"
            )
        return self

    @model_validator(mode="after")
    def _needs_path(self) -> ExperimentConfig:
        if self.data.source != "synthetic" and not self.data.path:
            raise ValueError(f"data.path is required for data.source = {self.data.source!r}")
        return self


class ConfigKeyMoved(UserWarning):
    """An old config's key was read under its new name (one line: old, new)."""


# keys that moved or were renamed: an old config keeps loading, with a one-line notice naming the new key
MOVED: dict[tuple[str, str], tuple[str, str]] = {
    ("attack", "attackers"): ("attack", "suite"),
    ("attack", "workers"): ("workers", "count"),
    ("attack", "queue_size"): ("workers", "queue_size"),
    ("attack", "submit_timeout"): ("workers", "submit_timeout"),
    ("attack", "worker_addresses"): ("workers", "addresses"),
    ("attack", "tls_root_cert"): ("workers", "tls_root_cert"),
    ("attack", "tls_cert"): ("workers", "tls_cert"),
    ("attack", "tls_key"): ("workers", "tls_key"),
    ("attack", "retry_seconds"): ("workers", "retry_seconds"),
    ("attack", "sandbox"): ("workers", "sandbox"),
    ("attack", "limits"): ("workers", "limits"),
}


def move_keys(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` with every key of ``MOVED`` under its new name, each move a ``ConfigKeyMoved`` warning; a key given
    under both names is a ValueError."""
    import warnings

    out = {k: dict(v) if isinstance(v, dict) else v for k, v in tree.items()}
    for (old_section, old_key), (new_section, new_key) in MOVED.items():
        section = out.get(old_section)
        if not isinstance(section, dict) or old_key not in section:
            continue
        target = out.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue
        if new_key in target:
            raise ValueError(f"{old_section}.{old_key} and {new_section}.{new_key} both given: keep {new_section}.{new_key}")
        target[new_key] = section.pop(old_key)
        warnings.warn(f"{old_section}.{old_key} is now {new_section}.{new_key}: read as such", ConfigKeyMoved, stacklevel=2)
    return out


class ConfigError(LeakbedError, ValueError):
    """A config that cannot describe a run; its message is one line naming the field."""


def _parse_value(text: str) -> Any:
    """Read an override's value as TOML (numbers, booleans, arrays, quoted strings), else a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Set ``a.b.c=value`` inside a nested dict (``defenses.0.strength`` indexes a list), creating sections as needed."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {assignment!r}: expected key=value")
    parts = key.split(".")
    node: Any = tree
    for part in parts[:-1]:
        if isinstance(node, list):
            node = _list_item(node, part, key)
            continue
        child = node.setdefault(part, {})
        if not isinstance(child, dict | list):
            raise ConfigError(f"override {key}: {part} is not a section")
        node = child
    value = _parse_value(raw.strip())
    if isinstance(node, list):
        index = _index(node, parts[-1], key)
        node[index] = value
    else:
        node[parts[-1]] = value


def _index(items: list, part: str, key: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(f"override {key}: {part} is not an index of a {len(items)}-item list")
    return int(part)


def _list_item(items: list, part: str, key: str) -> dict:
    item = items[_index(items, part, key)]
    if not isinstance(item, dict):
        raise ConfigError(f"override {key}: item {part} is not a section")
    return item


def _inside(annotation: Any, part: str | int) -> Any:
    """The type one step of a pydantic error's location inside ``annotation``: a model's field, a list's item, a dict's
    value (Annotated and Optional unwrapped); None where it cannot tell."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        models = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        annotation = models[0] if len(models) == 1 else annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(part) if isinstance(part, str) else None
        return None if field is None else field.annotation
    if get_origin(annotation) in (list, tuple, set, frozenset) and isinstance(part, int):
        return get_args(annotation)[0]
    if get_origin(annotation) is dict:
        return get_args(annotation)[1]
    return None


def known_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The keys the section at ``loc`` (a pydantic location below ``model``) takes; [] where it cannot tell."""
    section: Any = model
    for part in loc:
        section = _inside(section, part)
    while get_origin(section) is Annotated:
        section = get_args(section)[0]
    return list(section.model_fields) if isinstance(section, type) and issubclass(section, BaseModel) else []


def _deeper_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """``section.key`` for the keys of each sub-section of the section at ``loc``: a key given one level too high."""
    return [f"{name}.{key}" for name in known_keys(model, loc) for key in known_keys(model, (*loc, name))]


def unknown_key_hint(key: str, known: list[str], list_all: bool = False, deeper: list[str] = ()) -> str:
    """``; did you mean 'x'?`` with the closest of ``known`` or of ``deeper`` (keys one section down, ``fl.rounds``)
    by difflib, and `` (valid: ...)`` listing ``known`` when ``list_all`` or nothing is close."""
    close = difflib.get_close_matches(key, [*known, *deeper], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} (valid: {', '.join(sorted(known))})" if known and (list_all or not close) else hint


def one_line(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None, list_all: bool = False) -> str:
    """A pydantic error as one line naming its field (under ``prefix``, e.g. ``attack.params.mlp``). An unknown key of
    ``model`` (the model validated) gets the closest valid key of its section, and with ``list_all`` every valid key."""
    first = err.errors()[0]
    where = ".".join([*([prefix] if prefix else []), *(str(p) for p in first["loc"])]) or "config"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    got = (
        f" (got {first['input']!r})"
        if first["type"] not in ("missing",) and "input" in first and not isinstance(first["input"], dict)
        else ""
    )
    hint = ""
    if model is not None and first["type"] == "extra_forbidden" and first["loc"]:
        *section, key = first["loc"]
        hint = unknown_key_hint(str(key), known_keys(model, tuple(section)), list_all, _deeper_keys(model, tuple(section)))
    return f"{where}: {first['msg'].removeprefix('Value error, ')}{hint}{got}{more}"


def split_overrides(text: str) -> list[str]:
    """Split ``"a=1 b=[\"x\", 'y'] c='two words'"`` on whitespace outside brackets and quotes."""
    parts, current, depth, quote = [], [], 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch.isspace() and depth == 0:
            if current:
                parts.append("".join(current))
                current = []
            continue
        current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


def build_config(tree: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Validate a raw tree plus ``key=value`` overrides into an ExperimentConfig."""
    tree = _deep_copy(tree)
    for assignment in overrides:
        apply_override(tree, assignment)
    try:
        return ExperimentConfig.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(one_line(err, model=ExperimentConfig)) from None


def read_tree(path: str | Path | None) -> dict[str, Any]:
    """The raw TOML tree of a config file ({} for None), or a one-line ConfigError."""
    if path is None:
        return {}
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{p}: not valid TOML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read: {err}") from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Load a TOML file (or the defaults when ``path`` is None) and apply overrides."""
    return build_config(read_tree(path), overrides)


def _deep_copy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _deep_copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_deep_copy(v) for v in tree]
    return tree


def dump_config(cfg: ExperimentConfig) -> str:
    """The frozen config as TOML, readable back by ``load_config``."""
    import tomli_w

    return tomli_w.dumps(cfg.model_dump(mode="json"))
