"""Every value an attack can read, with its type and unit: the plugin API page's section on the round's training
config (``ctx.store.read_config(r)``: ``TrainConfig.KEYS`` and the server's additions), the store's arrays
(``InputsView``) and the attacker's knowledge (``ctx.knowledge``).

Types come from the code (the dataclasses' annotations, the config models' fields); units and meanings of the
training keys come from the ``[fl]`` fields they are made from. What the code cannot say (the unit of an array, a
dataclass field's unit) is written here once, and ``section`` refuses to render when a key the code has is missing
from it, so the page cannot fall behind a new key.
"""

from __future__ import annotations

import dataclasses

from leakbed.core.config import FLConfig, ModelConfig
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.tables import markdown_table
from leakbed.core.training import TrainConfig
from leakbed.reference.fields import rows

# each key of the round's training config (TrainConfig.KEYS) -> the [fl] field TrainConfig.of makes it from
TRAIN_FROM = {
    "epochs": "local_epochs",
    "batch_size": "batch_size",
    "lr": "lr",
    "optimizer": "optimizer",
    "momentum": "momentum",
    "steps": "local_steps",
}
# what the server adds to the training keys it shares with the attacks (leakbed.server.tap): key -> type, unit, what
SERVER_ADDS = {
    "participants": ("int", "devices", "how many devices the server sampled this round (K); a curious server knows it"),
    "sampled": ("str", "pseudonyms", "the sampled devices' shuffler pseudonyms, comma-separated; only for an attack "
                "that declares `Needs.participation`"),
}  # fmt: skip
# the store's arrays: (call, key, dtype, shape, unit, what); n = updates, d = the attack layers' size
STORE = [
    ("read_anon()", "ids", "str", "(n,)", "id", "opaque update id, the same in every array and output"),
    ("read_anon()", "vectors", "float32", "(n, d)", "1 (L2-normalised)", "the attack layers' Δw, flattened"),
    ("read_anon()", "num_examples", "int64", "(n,)", "examples", "what the device reported having trained on"),
    ("read_anon()", "round", "int64", "(n,)", "round", "the round the update answered"),
    ("read_anon_meta()", "norm", "float64", "(n,)", "parameter value", "L2 norm of the whole Δw (NaN: not recorded)"),
    ("read_anon_meta()", "sparsity", "float64", "(n,)", "fraction 0..1", "share of exact zeros in the whole Δw"),
    ("read_anon_meta()", "nbytes", "float64", "(n,)", "bytes", "the reply's array bytes"),
    ("read_shadow()", "[0] vectors", "float32", "(m, d)", "1 (L2-normalised)", "the attacker's own Δw on its prior"),
    ("read_shadow()", "[1] labels", "str", "(m,)", "user id", "the prior user each shadow update was made for"),
    ("read_shadow()", "[2] rounds", "int64", "(m,)", "round", "the global model it was made from"),
    ("read_global(r)", "<parameter>", "float32", "the parameter's", "parameter value",
     "the global model the devices of round r started from"),
    ("read_anon_full(r)", "<id> -> <parameter>", "float32", "the parameter's", "parameter value",
     "every parameter's Δw of each update of round r (`Needs.full_updates` only)"),
    ("global_rounds()", "", "list[int]", "", "round", "the rounds whose global model has arrived"),
]  # fmt: skip
# dataclass fields an attack reads through ctx.knowledge: "Class.field" -> unit, what
KNOWLEDGE = {
    "AttackerKnowledge.prior": ("user id -> examples", "the attacker's prior data about each user it targets"),
    "AttackerKnowledge.corpus_meta": ("", "the corpus' task, classes, input shape and vocabulary (below); no users"),
    "AttackerKnowledge.model": ("", "the run's model settings (below): `build_model(model, corpus_meta)` rebuilds it"),
    "AttackerKnowledge.keys": ("parameter names", "the parameters an update vector is made of, in order"),
    "AttackerKnowledge.seed": ("seed", "the attacker's own seed (never the experiment's)"),
    "AttackerKnowledge.device": ("name", "where the attacker computes: auto, cpu or cuda"),
    "AttackerKnowledge.shadow_batch_users": ("users", "how many prior users the shadow training batches together"),
    "Corpus.name": ("name", "the data source's name"),
    "Corpus.task": ("name", "multiclass, multilabel or next-token"),
    "Corpus.num_classes": ("count", "classes, labels, or the vocabulary size for next-token"),
    "Corpus.input_shape": ("elements per axis", "one example's x shape"),
    "Corpus.users": ("", "empty in the knowledge: the attacker's users are in `prior`"),
    "Corpus.vocab": ("tokens", "the vocabulary of a text corpus, else None"),
    "Corpus.time": ("name", "what each example's t holds: timestamps, or row order (the position in the data)"),
    "UserData.x": ("pixel value 0..1, or token id", "float32 images (k, C, H, W), or int64 token windows (k, L)"),
    "UserData.y": ("class, label or token id", "int64 classes (k,), float32 multi-hot (k, K), or int64 tokens (k, L)"),
    "UserData.t": ("time, or row index", "float64 capture time (or album index) per example; a chrono prior sorts by it"),
    "UserData.attrs": ("per column", "per-example attribute columns, each (k,)"),
}


class Incomplete(RuntimeError):
    """The code has a key this module does not document (generation refuses: the page would fall behind)."""


def _types(cls: type) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(cls)}


def train_rows() -> list[list[str]]:
    """``read_config(r)``: each training key with its type, unit, the ``[fl]`` field it comes from and what it is;
    then the server's additions."""
    if set(TRAIN_FROM) != set(TrainConfig.KEYS):
        raise Incomplete(f"TrainConfig.KEYS {TrainConfig.KEYS} != the documented {tuple(TRAIN_FROM)}")
    types, fl = _types(TrainConfig), {r.key: r for r in rows(FLConfig)}
    out = [[f"`{k}`", f"`{types[k]}`", fl[src].unit, f"`fl.{src}`", fl[src].description] for k, src in TRAIN_FROM.items()]
    return out + [[f"`{k}`", f"`{t}`", unit, "(the server)", what] for k, (t, unit, what) in SERVER_ADDS.items()]


def knowledge_rows() -> list[list[str]]:
    """``ctx.knowledge``: every field of the knowledge, its corpus and a prior user's data, with type and unit; then
    the model settings (``ctx.knowledge.model``) as the config declares them."""
    out = []
    for cls, path in ((AttackerKnowledge, "ctx.knowledge"), (Corpus, "ctx.knowledge.corpus_meta"),
                      (UserData, "ctx.knowledge.prior[user]")):  # fmt: skip
        for name, kind in _types(cls).items():
            if f"{cls.__name__}.{name}" not in KNOWLEDGE:
                raise Incomplete(f"{cls.__name__}.{name} is not documented in leakbed/reference/readable.py")
            unit, what = KNOWLEDGE[f"{cls.__name__}.{name}"]
            out.append([f"`{path}.{name}`", f"`{kind}`", unit, what])
    out += [[f"`ctx.knowledge.model.{r.key}`", f"`{r.type}`", r.unit, r.description] for r in rows(ModelConfig)]
    return out


def store_rows() -> list[list[str]]:
    return [[f"`{call}`", f"`{key}`" if key else "", f"`{dtype}`", f"`{shape}`" if shape else "", unit, what]
            for call, key, dtype, shape, unit, what in STORE]  # fmt: skip


def section() -> str:
    """The plugin API page's section on every value an attack can read."""
    return "\n".join([
        "## Every value an attack can read",
        "",
        "Everything an attack's hooks can read besides its own parameters (the [catalog](catalog.md) lists each "
        "attack's) and its own folder: the training config the server sent each round, the store's arrays and the "
        "attacker's knowledge, each with its type and unit. Nothing else reaches the attack side.",
        "",
        "### The round's training config: `ctx.store.read_config(r)`",
        "",
        "A dict of these keys (`TrainConfig.KEYS`, the devices' training as the `[fl]` section sets it, and what "
        "the server adds). `TrainConfig.from_config(ctx.store.read_config(r))` reads them back as a `TrainConfig`.",
        "",
        markdown_table(["key", "type", "unit", "from", "what"], train_rows()),
        "",
        "### The store's arrays: `ctx.store` (`InputsView`)",
        "",
        "n = anonymous updates so far, m = shadow updates, d = the attack layers' size (`len` of a vector); "
        "Δw = `w_global - w_local`.",
        "",
        markdown_table(["call", "key", "dtype", "shape", "unit", "what"], store_rows()),
        "",
        "### The attacker's knowledge: `ctx.knowledge`",
        "",
        "k = a prior user's examples. The model settings are the experiment's `[model]` section.",
        "",
        markdown_table(["key", "type", "unit", "what"], knowledge_rows()),
        "",
    ])  # fmt: skip
