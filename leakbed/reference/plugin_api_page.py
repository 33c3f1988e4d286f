"""The plugin API reference: ``leakbed.plugin``, the one module a plugin imports, read from the code.

Every name of ``leakbed.plugin.__all__`` with its signature and docstring (``inspect``); the fields of ``Needs``
and ``Scoring`` with their pydantic descriptions; the fields and methods of the contexts an attack and a plugin scorer
get; each of the referee's scorer kinds (``referee.kinds``) with the outputs it expects (``referee.schemas``) and how
it covers the updates an attack was given (its module's docstring); the truth fields a plugin scorer may declare.
The prose between them (what runs where, Δw, the worked example, where the numbers are written) is written here.

No attack module is imported: ``leakbed.plugin`` imports leakbed's own contract (``attacks.contract``,
``attacks.scoring``), and the two names it re-exports from a built-in attack (seed 004's property classifier, in
``attacks.feature_inference``) are read from that module's source with ``ast``, as trusted code knows attacks: as
data.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from leakbed.core.tables import markdown_table
from leakbed.reference import readable

# --- hand-written parts ----------------------------------------------------------------------------------------

INTRO = """# Plugin API: `leakbed.plugin`

A plugin (an attack or a defense, in a package of its own) imports leakbed only from `leakbed.plugin`. This page
lists every name that module exports, the contexts an attack and a plugin scorer get, the outputs each of the
referee's scorer kinds expects, and the truth fields a plugin's own scorer may ask for. The tutorials walk through
a whole plugin: [Write an attack plugin](../tutorials/attack-plugin.md),
[Write a defense plugin](../tutorials/defense-plugin.md); the [threat model](../explanation/threat-model.md) says
what confines them.

The module is typed and versioned: the contracts are generic over a plugin's own parameters
(`class MyAttack(Attack[MyParams])`, so `ctx.params` is a `MyParams` to a type checker, and `params` is set from
the subscript), `mypy --strict` passes over it and leakbed's own plugins in the test suite
([Type-check a plugin](../how-to/type-check-a-plugin.md)), and `API_VERSION` is the contract's version
([version and deprecation policy](../explanation/deprecation-policy.md)).

*Generated from `leakbed/plugin.py`, `leakbed/core/declaration.py`, `leakbed/attacks/contract.py`, `leakbed/attacks/scoring.py`,
`leakbed/core/inputs.py`, `leakbed/referee/kinds.py` and `leakbed/referee/schemas.py` by `leakbed/reference/plugin_api_page.py`.*

## Where an attack's code runs

An attack's code, built-in or a plugin's, runs only in sandboxes, never in a trusted leakbed process:

- **its lane**: one sandbox per attack and prior (plus one lane for the attacker's shadow training). The lane runs
  `on_round` once per round, then `fit` and `predict` in one task after the stream. A fresh instance of the class
  runs each task; what `on_round` keeps for `fit` goes into the attack's own folder (`ctx.folder`, or
  `ctx.workspace` to keep arrays), which lives as long as the lane (a lane that dies is restarted with an empty
  one, and its task retried once);
- **its introspection**: trusted code learns the attack as a declaration (its name, params declaration, needs, scorer,
  budget...), data returned by a sandbox that imports the module; declarations are cached per installed
  distribution (name, version, content hash), so a changed plugin is introspected again;
- **its checks**: its parameters are checked against its declaration, in leakbed's own params language (see
  [Parameters](#parameters-leakbeds-params-language)), on the trusted side, and by its own params model
  (validators, constraints the language has no word for) and `check` hook in sandboxes, one per prior, before
  anything starts;
- **its own scorer**, if it has one: in a scoring sandbox (see [A plugin's own scorer](#a-plugins-own-scorer)).

In its lane an attack reads its inputs at `/leakbed/inputs`, mounted read-only: trusted code writes them into the
prior's store (`<run>/attack-store/<prior>/`): the global model and training config of each round, the anonymous
updates, the attacker's shadow updates and its knowledge (`ctx.store`, `ctx.knowledge`). It writes only
`/leakbed/out` (`ctx.folder`), a tmpfs of `workers.limits.output` MiB: nothing it writes lands on the host's disk.
`predict`'s outputs go back to trusted code through a pipe and are checked as hostile data before anything reads
them (`leakbed/workers/hostile.py`: bounded size, arrays of numbers, booleans or text only, never pickled objects, names of
`[A-Za-z0-9_./-]`); the checked copy is written to `<run>/<prior>/outputs/<name>.npz`. Its printed output goes to
`<run>/attack-logs/<prior>-<name>.log` (capped at `workers.limits.log` MiB; on a remote attack worker, to the
worker's `--log-dir`). Every task has a deadline: the value
of the params field the attack names in `budget` [s] where that is shorter than `workers.task_deadline`, else
`workers.task_deadline` (a budget never lengthens a task); a task past it is ended and counted failed, and the run
goes on. Its `needs` are checked before anything starts in every entry point
(`leakbed run`, `flwr run`, `deploy-local`, compose, a sweep): a run it cannot serve is refused in one line, e.g.
an attack with `level = "update"` under `fl.secure_aggregation = "secagg+"`.

## Updates, global models and Δw

Δw, everywhere in leakbed, is **w_global − w_local**: the global model the device received minus the model it sent
back. `ctx.store.read_global(r)` is the global model the devices of round `r` started from (the server's model
before round `r`'s updates), so a device's local model is `read_global(r)[k] - Δw[k]` for each parameter `k`, `r`
being the update's round in `read_anon()["round"]`. (With shuffler batching an update is filed under the round it
was released in, and its Δw is taken against that round's global model, so the same formula holds.)

`read_anon()` gives each update's attack-layer Δw, flattened and L2-normalised (`vectors`); an attack that
declares `Needs(full_updates=True)` also gets every parameter's Δw, unnormalised, through `read_anon_full(r)`.

### Building a model and loading arrays

`build_model(ctx.knowledge.model, ctx.knowledge.corpus_meta)` builds the run's architecture (as the devices train
it, `model.name = "auto"` resolved) with fresh weights; `load_arrays(model, arrays)` loads a state dict of NumPy
arrays, by parameter name, into it (every parameter: it is strict). `pick_device()` picks CUDA where the attack
side has it. Together they rebuild the model a device sent back from the global model and its Δw:

```python
{example}```

The example runs in this page's test (`tests/docs/test_site.py`) against a small store.
"""

PARAMS_INTRO = """## Parameters: leakbed's params language

An attack's `params` is a pydantic model (subclass `Params`), and pydantic code is plugin code: it runs only in a
sandbox. Trusted code knows the model as a declaration in a small language of leakbed's own, which the
introspection makes from the model's fields: each field's type, bounds, choices, lengths, default, and a description
whose bracketed tail is its unit (`"neighbours [count]"`). Nothing else crosses: no pattern, no reference, no JSON
Schema. leakbed's own code checks a config's `[attack.params.<name>]` against it, at a bounded cost (every size is
capped, no regular expression runs, nothing is fetched), fills in the defaults, and refuses a wrong value in one
line naming the key (exit 2). The same declaration feeds the [catalog](catalog.md), `leakbed validate` and the
did-you-mean on a mistyped key.

| a field written as | is declared as |
|---|---|
| `bool`, `int`, `float`, `str` | that type (an `int` also takes `2.0`; a `float` also takes `2`) |
| `Field(ge=, gt=, le=, lt=)` | its bounds (numbers) |
| `Field(min_length=, max_length=)` | its lengths (a string's characters, a list's items) |
| `Literal["a", "b"]`, an `Enum` of strings or integers | its choices |
| `list[X]`, `tuple[X, ...]` (X one of the four, maybe bounded or a `Literal`) | a list; bounds and choices hold for each item |
| `X \\| None = None` | optional: left unset, it is `None` (TOML has no null; the frozen config leaves it out) |
| a `Params` (or pydantic model) field | a table of its own fields, `[attack.params.<name>.<field>]` |

A type the language has no word for is refused when the attack is introspected, in one line naming the field: a
union other than `X | None`, a `dict`, a tuple of fixed length, `Any`, a list of lists or of tables, an optional
table, an alias, an `Optional` field whose default is not `None`, a model whose own default breaks its bounds.
What pydantic checks beyond the language (a string `pattern`, `multiple_of`, a `format` such as a path or a date,
unique items) and the model's validators stay the model's: the attack is then marked as one that validates, and
its check (below) runs the model over the run's table in a sandbox before anything starts. A pattern is never
evaluated by trusted code.

{limits}

### A plugin's `check`

`Attack.check(params, setting)` says why a run cannot serve the attack (one line), beyond its `needs`. It runs in
a sandbox, once per prior, and sees that prior's knowledge only (`setting.prior`: the attacker's prior data; the
corpus' shape, the model and the training the devices will do); where no attack of the run has a `check` hook, the
params models run in one sandbox that sees no prior at all. What comes back is the params as the model made
them, checked again against the declaration, and it must be the same for every prior: a check cannot carry what
it saw of one prior into the parameters another prior's lanes get.

"""

OUTPUTS_INTRO = """## What `predict` returns: the outputs of each scorer kind

`predict` returns a dict of NumPy arrays (numbers, booleans or text; never objects), filed under `ctx.name`. An
attack chooses how the referee scores it with its `scorer` class attribute: the name of one of the kinds below,
whose outputs it must return in the form the kind's table gives, or a `Scoring` (below) naming its own function.
Before a kind's scorer runs, the outputs are checked against the table: a missing array, another dtype kind, or a
shape whose symbolic dims disagree fails the attack's score in one line (`OutputsError`), never a traceback.
Arrays a kind does not name are kept in the outputs file and not read. A name holding `*` is a pattern (any
number of arrays match it, each checked).

**The main table.** An attack of the `reid` family (subclass `ReidAttack`: `family = "reid"`, `scorer = "reid"`)
gets a row in the closed-world re-identification table, the one the console prints first and `report.md` opens
with: its outputs are the `reid` kind's, `ids` (the anonymous updates' ids, from `read_anon()`), `classes` (the
identities it ranks, `k` of them), `scores` (one row of `k` scores per update, higher = more likely) and,
optionally, `rounds`. `ReidAttack.predict` builds exactly these from `classify`.

**Coverage.** Every kind scores over every anonymous update the attack was given (`given`, written by the pool
beside its outputs), not only the rows it returned: a given update without a row, or with a non-finite number in a
row, counts as a random ranking (uniform scores drawn by the referee from its own generator) or, for label kinds,
a random guess; a row for an id that was not given, or a second row of an id, is ignored. Every result carries
`coverage`, `rows_missing`, `rows_extra`, `rows_duplicate` and `n_updates`, and the report prints the coverage
beside the score. Each kind's paragraph below says how it joins rows that are not one per update. Classes are
joined the same way: a kind ranks the users the referee holds (those the attacker's knowledge lists), the splits
and columns its params define (recomputed by the referee), never the `classes`, `users`, `seen`, `holdout` or
`columns` an output names: a class left out counts at chance, one the referee does not hold or a repeat is ignored,
and `classes_missing`, `classes_extra` and `classes_duplicate` are reported (see
[the sets every metric is taken over](../explanation/metrics.md#the-sets-every-metric-is-taken-over)).

{symbols}

{kinds}
"""

PLUGIN_SCORER = """## A plugin's own scorer

An attack that no kind fits scores itself: `scorer = Scoring(kind="plugin", function="my_package.scoring:score",
truth=("label-share",))`. The function runs in a scoring sandbox of its own that holds, read-only, only the
attack's outputs (as the pool checked them), its parameters, the ids of the updates it was given and the truth
fields it declared, for those updates of its own prior: no store, no network, no other attack's outputs, and
nothing an attack sandbox can later read. It gets a `ScoreContext` and returns a dict: scalar metrics at the top
level (`accuracy`, `chance`, `x_chance`, `coverage`...), `notes` (lines for the report), `tables`, `exports`
(further rows for the dashboards) and nested dicts of numbers. What comes back is checked
(`leakbed/workers/numbers.py`): every number finite and within 2**53, shares (`ap`, `top1`, `top5`, `auc`,
`accuracy`, `chance`, `coverage`...) in [0, 1], counts (`n_updates`, `rows_missing`...) whole and not negative;
texts of at most 300 characters, keys of `[A-Za-z][A-Za-z0-9_-]*`, four levels deep, at most 16 notes, 8 tables
and 16 exports; `figures` are dropped (a scoring sandbox writes no file). A number out of its range refuses the
result: that attack's row fails, in one line, and the run goes on. Its numbers are never the referee's: they are
filed apart (`plugin_scored` in `metrics.json`), in no headline table (the closed-world table, × chance, the
sweep's), marked *plugin-scored* in the report and on the console and `scorer="plugin"` in Prometheus, where its
exports are named `<attack>/<export>`; its texts are printed as the plugin's words, escaped
(`leakbed/core/plugin_text.py`). The referee cannot check a plugin's coverage for it: score over `ctx.given`,
count an update without a usable row as a random guess, and report `coverage` and `rows_missing` as the kinds do
(the report then prints them).

The old form, `scorer = "module:function"`, still loads: it is read as
`Scoring(kind="plugin", function="module:function", truth=("user_id", "round"))`.

### Truth fields a plugin scorer may declare

`Scoring.truth` names them; `ctx.truth.field_for(ids, name)` returns each update's value (None where an update
lacks it), and a field not declared is not there (KeyError). `user_id` and `round` come from the server's
sealing; the others are facts each device sealed with its reply (`leakbed/client/`), for the referee only:

{truth_table}
"""

WRITTEN = """## Where a plugin's numbers are written

- `<run>/<prior>/metrics.json`: every attack's metrics as scored, closed-world attackers under `attackers`, the
  others (plugins included) under `suite`, with `scored_by = "plugin"` where a plugin scored itself; an attack that
  could not run, whose fit failed or whose scorer failed is under `attackers_failed`, with the reason (the run's
  top-level `metrics.json` holds the closed-world table only);
- `<run>/report.md`: the closed-world table, then per prior a section per further attack with its metrics, its
  coverage and its scorer's notes (a plugin's marked as its own words);
- `<run>/<prior>/outputs/<name>.npz`: the outputs as trusted code checked and wrote them (what the referee scored),
  with `<name>.given.npy`, the ids of every update the attack was given;
- the console: after a run, `leakbed run` prints each prior's failed replies (grouped by kind), the closed-world
  table (a line instead where the suite has no closed-world attacker), then the suite's other attacks the referee
  scored in a table of their own, then those scored by their own plugin scorers in another (headline metric, its
  chance, coverage; shares in percent), then where each of the above was written; how each table is chosen:
  [How leakbed's tables are chosen](../explanation/tables.md).
"""

# Where each sealed fact comes from; the page's test checks each name appears in client/ (or the server's sealing).
TRUTH_FIELDS: list[tuple[str, str, str]] = [
    ("user_id", "the update's owner (a user id of the data)", "always (the server's sealing)"),
    ("round", "the round the update was trained in", "always (the server's sealing)"),
    ("node", "the device's per-run keyed node pseudonym", "every individual update (the server's sealing)"),
    ("label-share", "share of each class in the device's private data: a list of `num_classes` floats",
     "multiclass tasks (`leakbed/client/user_facts.py`)"),
    ("attr-<name>", "the majority value of attribute column `<name>` in the device's data (a float)",
     "numeric attribute columns (`leakbed/client/user_facts.py`)"),
    ("batch-examples", "distinct examples the update's batches used", "always (`leakbed/client/batch_truth.py`)"),
    ("has-property", "1 when those examples held the `property` attribute, else 0",
     "data with a `property` column (`leakbed/client/batch_truth.py`)"),
    ("property-fraction", "share of those examples holding the property", "data with a `property` column"),
    ("batch-records", "content hashes of the records the batches used", "an attack in the suite declares "
     "`Needs(records=True)` (`leakbed/client/batch_truth.py`)"),
    ("batch-properties", "each of those records' property (0/1), aligned with `batch-records`",
     "`records` and a `property` column"),
    ("adversary", "1 on an adversarial participant's update", "adversarial participants (`leakbed/client/adversary.py`)"),
    ("adv-round", "the round an adversarial participant's score is about (t − 1)", "adversarial participants"),
    ("adv-score", "its property score for the other participants of that round", "adversarial participants"),
]

# __all__'s names by role (``leakbed/plugin.py``'s docstring); a name exported later and not placed here is listed
# under "Other names" by itself.
GROUPS: list[tuple[str, list[str]]] = [
    ("The attack contract", ["Attack", "ReidAttack", "Needs", "Scoring", "Setting", "Outputs", "Scores"]),
    ("What an attack's hooks get", ["AttackContext", "InputsView", "AttackerKnowledge", "RoundSnapshot", "Corpus",
                                    "UserData"]),
    ("Model helpers", ["build_model", "load_arrays", "pick_device", "feature_split", "train_property_net",
                       "predict_property"]),
    ("What a plugin's own scorer gets", ["ScoreContext", "TruthView", "reid_metrics", "random_ranking_ap"]),
    ("Defenses (device code)", ["Defense", "DeviceContext", "DefenseSetting", "ServerContext", "reply_mod"]),
    ("Both", ["Params", "NoParams", "LeakbedError", "ATTACKS", "DEFENSES", "API_VERSION", "LeakbedDeprecationWarning"]),
]

# Names whose docstring the code does not give; written here, and marked so.
NOTES = {
    "load_arrays": "Loads `arrays` (parameter name → NumPy array) into `model` as its state dict (strict: every "
    "parameter of the model, no other).",
}

# Modules ``leakbed.plugin`` re-exports from that are attack code: read from their source, never imported here.
ATTACK_CODE = re.compile(r"^attacks\.(?!contract$|scoring$)")

EXAMPLE = '''\
from leakbed.plugin import AttackContext, build_model, load_arrays


def local_models(ctx: AttackContext, rnd: int) -> dict:
    """Each anonymous update of round rnd as the model its device sent back (needs Needs(full_updates=True))."""
    g = ctx.store.read_global(rnd)  # the global model the devices of round rnd started from
    models = {}
    for update_id, delta in ctx.store.read_anon_full(rnd).items():  # Δw = w_global - w_local, per parameter
        model = build_model(ctx.knowledge.model, ctx.knowledge.corpus_meta)
        load_arrays(model, {k: g[k] - delta[k] for k in g})  # w_local = w_global - Δw
        models[update_id] = model.eval()
    return models
'''


# --- rendering from the code -----------------------------------------------------------------------------------


class _Raw(str):
    """An annotation already written as text (``from __future__ import annotations``): shown as is, unquoted."""

    def __repr__(self) -> str:
        return str(self)


def type_text(t: Any) -> str:
    """A type as a reader writes it: ``frozenset[str] | None``, constraints (``Annotated``) left out."""
    if isinstance(t, str):
        return t
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin is typing.ClassVar:
        return type_text(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]" if args else name
    if t is type(None):
        return "None"
    if t is Ellipsis:
        return "..."
    if isinstance(t, type):
        return t.__name__
    return str(t).replace("typing.", "")


def signature(obj: Any) -> str:
    """``(name: type = default, ...) -> type``, or '' when ``obj`` has none to show."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""

    def raw(annotation: Any) -> Any:
        return _Raw(annotation) if isinstance(annotation, str) else annotation

    params = [p.replace(annotation=raw(p.annotation)) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=raw(sig.return_annotation)))


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""  # the dataclass' generated text, not a docstring
    return _markdown(doc)


def _markdown(doc: str) -> str:
    """A docstring in markdown: reST's ``literal`` as `literal`, ``::`` blocks as code."""
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out.append(line.rstrip()[:-1])
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
                block.append(lines[i][4:])
                i += 1
            lang = "toml" if any(b.lstrip().startswith("[") for b in block) else "python"
            out += ["", f"```{lang}", *"\n".join(block).strip("\n").splitlines(), "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip()


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string.lstrip("#").strip()
    return found


@dataclasses.dataclass(frozen=True)
class Attr:
    name: str
    type: str
    default: str
    note: str


def class_attributes(cls: type) -> list[Attr]:
    """The annotated attributes a class body declares (dataclass fields, class attributes), each with its default
    and the comment beside it or just above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return []
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    comments = _comments(source)
    lines = source.splitlines()
    out = []
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or name == "model_config":
            continue
        above = []
        n = node.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, comments.get(n, ""))
            n -= 1
        note = " ".join([*above, comments.get(node.end_lineno or node.lineno, "")]).strip()
        annotation = ast.unparse(node.annotation)
        annotation = re.sub(r"^ClassVar\[(.*)\]$", r"\1", annotation)
        default = ast.unparse(node.value) if node.value is not None else ""
        if default.startswith("field(default_factory="):
            default = default.removeprefix("field(default_factory=").removesuffix(")") + "()"
        out.append(Attr(name, annotation, default, re.sub(r"``([^`]+)``", r"`\1`", note)))
    return out


def _attr_table(attrs: list[Attr], what: str = "attribute") -> list[str]:
    rows = [[f"`{a.name}`", f"`{_cell(a.type)}`", f"`{_cell(a.default)}`" if a.default else "", _cell(a.note)] for a in attrs]
    return markdown_table([what, "type", "default", ""], rows).splitlines()


def model_fields(model: type[BaseModel]) -> list[str]:
    """A pydantic model's fields: type, default, description."""
    from leakbed.reference.fields import _bound

    rows = []
    for name, info in model.model_fields.items():
        if info.is_required():
            shown = "required"
        else:
            default = info.get_default(call_default_factory=True)
            shown = f"`{default!r}`" if not isinstance(default, frozenset) else "`frozenset()`"
        rows.append([f"`{name}`", f"`{_cell(type_text(info.annotation))}`", _cell(shown), _cell(_bound(info)),
                     _cell(info.description or "")])  # fmt: skip
    return markdown_table(["field", "type", "default", "bound", "description"], rows).splitlines()


OURS = ("core.", "attacks.", "defenses.", "workers.", "referee.", "leakbed.")


def _own_members(cls: type, exported: frozenset[str] = frozenset()) -> list[tuple[str, Any]]:
    """Public methods and properties the class defines, with those it inherits from a class of ours that is not
    documented on its own (``exported``: e.g. ``InputsView``'s from the store's read side), in source order."""
    out: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is not cls and (klass.__name__ in exported or not klass.__module__.startswith(OURS)):
            break
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, classmethod | staticmethod):
                out.append((name, value.__func__))
            elif isinstance(value, property) or inspect.isfunction(value):
                out.append((name, value))
    return out


def _member(cls: type, name: str, value: Any) -> list[str]:
    if isinstance(value, property):
        returns = inspect.signature(value.fget).return_annotation if value.fget else inspect.Signature.empty
        kind = f" → `{returns}`" if isinstance(returns, str) else ""
        head = f"- `{name}` (property){kind}"
        doc = _markdown(inspect.getdoc(value) or "")
    else:
        head = f"- `{name}{signature(getattr(cls, name))}`"
        doc = _doc(value)
    return [head + (f": {_indent(doc)}" if doc else "")]


def _indent(text: str) -> str:
    return "\n  ".join(text.splitlines())


def document_class(cls: type, exported: frozenset[str] = frozenset()) -> list[str]:
    out = []
    doc = _doc(cls)
    if issubclass(cls, BaseModel):
        out += [doc, ""] if doc else []
        if cls.model_fields:
            out += [*model_fields(cls), ""]
        return out
    if dataclasses.is_dataclass(cls):
        out += [f"`{cls.__name__}{signature(cls)}`", ""]
    if not doc:  # no docstring of its own: its module's first paragraph says what it is
        first = re.split(r"\n\s*\n", inspect.getdoc(inspect.getmodule(cls)) or "")[0]
        doc = f"{_markdown(first)} *(its module's docstring)*" if first else ""
    if doc:
        out += [doc, ""]
    attrs = class_attributes(cls)
    if attrs:
        out += [*_attr_table(attrs, "field" if dataclasses.is_dataclass(cls) else "class attribute"), ""]
    base = next((k for k in cls.__mro__[1:] if k.__name__ in exported), None)
    if base is not None:
        out += [f"A [`{base.__name__}`](#{base.__name__.lower()}): what it declares and defines holds here too.", ""]
    members = _own_members(cls, exported)
    if members:
        out += [line for name, value in members for line in _member(cls, name, value)]
        out.append("")
    return out


def _from_source(module: str, name: str) -> tuple[str, str]:
    """(signature, docstring) of a function of ``module``, read from its source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return "", ""
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            args = ast.unparse(node.args)
            returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
            return f"({args}){returns}", ast.get_docstring(node) or ""
    return "", ""


def document_name(plugin: types.ModuleType, name: str) -> list[str]:
    """One name of ``leakbed.plugin``: its heading, where it is defined, its signature and docstring."""
    if name in getattr(plugin, "_LAZY", {}) and ATTACK_CODE.match(plugin._LAZY[name]):
        module = plugin._LAZY[name]
        sig, doc = _from_source(module, name)
        return [f"### `{name}`", "", f"*from `{module}`*", "", f"`{name}{sig}`", "", _markdown(doc), ""]
    obj = getattr(plugin, name)
    out = [f"### `{name}`", ""]
    if isinstance(obj, str):
        return [*out, f"`{name} = {obj!r}`: the entry-point group {'attacks' if 'attack' in obj else 'defenses'} "
                "are published under.", ""]
    if isinstance(obj, tuple):
        return [*out, f"`{name} = {obj!r}`: the version of this contract, (major, minor): a minor release adds, a major "
                "one removes or changes ([version and deprecation policy](../explanation/deprecation-policy.md)).", ""]
    if isinstance(obj, types.GenericAlias):
        return [*out, f"`{name} = {type_text(obj)}`: array name → array.", ""]
    out += [f"*from `{obj.__module__}`*", ""]
    if isinstance(obj, type):
        return out + document_class(obj, frozenset(plugin.__all__))
    out += [f"`{name}{signature(obj)}`", ""]
    doc = _doc(obj) or (f"{NOTES[name]} *(written for this page: the function has no docstring)*" if name in NOTES else "")
    return out + ([doc, ""] if doc else [])


# --- the scorer kinds ------------------------------------------------------------------------------------------


def _paragraph(doc: str, start: str) -> str:
    for para in re.split(r"\n\s*\n", doc):
        if para.lstrip().startswith(start):
            return " ".join(para.split())
    return ""


def kind_outputs(kind: str) -> list[tuple[str, str, str, str]]:
    """(array, dtype kinds, shape, required or optional) of each array the kind expects."""
    from leakbed.referee.kinds import KINDS
    from leakbed.referee.schemas import describe

    rows = []
    for array, spec in KINDS[kind].outputs.items():
        text = describe(spec)
        dtype, _, shape = text.partition(" (")
        dtype = dtype.replace("|", " or ")
        rows.append((array, dtype, "(" + shape if shape else "any", "optional" if spec.optional or "*" in array else "required"))
    return rows


def kinds_section() -> list[str]:
    import leakbed.referee.schemas as schemas
    from leakbed.referee.kinds import KINDS

    symbols = _paragraph(inspect.getdoc(schemas) or "", "Symbols:")
    kinds = markdown_table(["kind", "measures"], [[f"[`{k}`](#kind-{k})", _cell(kind.what)] for k, kind in KINDS.items()])
    out = [OUTPUTS_INTRO.format(symbols=re.sub(r"``([^`]+)``", r"`\1`", symbols), kinds=kinds).rstrip("\n")]
    out.append("")
    for k, kind in KINDS.items():
        module = importlib.import_module(kind.score.__module__)
        coverage = _paragraph(inspect.getdoc(module) or "", "Coverage")
        out += [f"### Kind `{k}`", "", f"{kind.what}. Scored by `{kind.score.__module__}`.", ""]
        arrays = [[f"`{a}`", d, f"`{s}`", r] for a, d, s, r in kind_outputs(k)]
        out += markdown_table(["array", "dtype", "shape", ""], arrays).splitlines()
        out.append("")
        if coverage:
            out += [re.sub(r"``([^`]+)``", r"`\1`", coverage), ""]
    return out


# --- the page --------------------------------------------------------------------------------------------------


def grouped(names: list[str]) -> list[tuple[str, list[str]]]:
    """``names`` by role, in GROUPS' order; any name no group places goes to "Other names"."""
    placed = {n for _, members in GROUPS for n in members}
    out = [(title, [n for n in members if n in names]) for title, members in GROUPS]
    rest = [n for n in names if n not in placed]
    return [g for g in [*out, ("Other names", rest)] if g[1]]


def params_limits() -> str:
    """The language's keys (``core.param_schema.ParamField``, with their descriptions) and its caps, as two tables."""
    from leakbed.core import param_schema as ps

    keys = [[f"`{name}`", _cell(info.description or "")] for name, info in ps.ParamField.model_fields.items()]
    caps = [["fields of one attack, nested tables' included", ps.MAX_FIELDS], ["tables within tables", ps.MAX_DEPTH],
            ["choices of one field", ps.MAX_CHOICES], ["characters of a string value", ps.MAX_TEXT],
            ["items of a list value", ps.MAX_ITEMS], ["a whole params table, as JSON [bytes]", ps.MAX_BYTES],
            ["characters of a field's name (a Python identifier)", ps.MAX_NAME]]  # fmt: skip
    return "\n".join(["A declared field, as trusted code holds it (`leakbed.core.param_schema.ParamField`):", "",
                      markdown_table(["key", "what it says"], keys), "", "leakbed's caps (a declaration or a value past "
                      "them is refused):", "", markdown_table(["what", "at most"], caps)])


def page() -> str:
    import leakbed.plugin as plugin

    paragraphs = re.split(r"\n\s*\n", inspect.getdoc(plugin) or "")
    last = next((i for i, para in enumerate(paragraphs) if para.startswith("A run then names")), 3)
    publishing = _markdown("\n\n".join(paragraphs[1 : last + 1]))  # entry points, naming it in a run (its words)
    parts = [INTRO.format(example=EXAMPLE), "## Publishing a plugin", "", publishing, ""]
    parts += ["## Every name of `leakbed.plugin`", "",
              "In the order a plugin meets them; `dir(leakbed.plugin)` lists the same names. Those that load torch "
              "or Flower (the model helpers, the defense contract) are loaded on first use.", ""]
    for title, names in grouped(list(plugin.__all__)):
        parts += [f"### {title}", "", ", ".join(f"[`{n}`](#{n.lower()})" for n in names), ""]
        for name in names:
            parts += ["#" + line if line.startswith("### ") else line for line in document_name(plugin, name)]
    parts.append(readable.section())
    parts.append(PARAMS_INTRO.format(limits=params_limits()))
    parts += kinds_section()
    fields = [[f"`{f}`", _cell(v), _cell(w)] for f, v, w in TRUTH_FIELDS]
    truth = markdown_table(["field", "value per update", "sealed when"], fields)
    parts.append(PLUGIN_SCORER.format(truth_table=truth))
    parts.append(WRITTEN)
    return "\n".join(parts).rstrip("\n") + "\n"
