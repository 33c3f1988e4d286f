"""Vocabulary restriction (seed 002 §7.3.2, "dimensionality reduction"): a device only uses the k
most frequent tokens of a pre-defined vocabulary of common words, as Google's keyboard uses a fixed
vocabulary of 5,000 words.

Training level: tokens outside the k most frequent become ``<unk>`` in the device's data, so the
embedding rows of rare tokens (which would reveal that a user typed them) get no gradient.
Update level (a Flower Mod): every parameter indexed by the vocabulary (embedding rows, and the
output layer's rows of a language model) is sent at the global value outside the allowed tokens,
so those rows of Δw are exactly zero. The "common words" are counted over the federation's data
(the same counts that built the corpus vocabulary). Threat model: the curious server learns only
which common tokens a device used.
"""

from __future__ import annotations

import functools

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from core.adoption import defenses_of
from core.config import ExperimentConfig
from core.data import Federation, UserData, federation
from core.data.corpus import Corpus
from defenses.mod_reply import device_user, keep_global, send, train_config, weights


def _is_special(token: str) -> bool:
    return token.startswith("<") and token.endswith(">") and len(token) > 2


def allowed_tokens(corpus: Corpus, k: int) -> np.ndarray:
    """Boolean mask over the vocabulary: the special tokens and the k most frequent others (ties by id)."""
    if corpus.vocab is None:
        raise ValueError(f"the vocab defense needs token data; corpus {corpus.name} has none")
    size = len(corpus.vocab)
    counts = np.zeros(size, np.int64)
    for data in corpus.users.values():
        counts += np.bincount(data.x.ravel(), minlength=size)[:size]
        if corpus.task == "next-token":
            counts += np.bincount(data.y.ravel(), minlength=size)[:size]
    special = np.array([_is_special(t) for t in corpus.vocab])
    allowed = special.copy()
    others = np.flatnonzero(~special)
    if k <= 0 or k >= len(others):
        allowed[:] = True
        return allowed
    order = others[np.lexsort((others, -counts[others]))]
    allowed[order[:k]] = True
    return allowed


@functools.lru_cache(maxsize=8)
def _allowed(cfg_json: str, rule: str, k: int) -> np.ndarray:
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    return allowed_tokens(federation(cfg, rule).corpus, k)


def unk_id(corpus: Corpus) -> int:
    return corpus.vocab.index("<unk>") if corpus.vocab and "<unk>" in corpus.vocab else 0


def restrict_data(data: UserData, allowed: np.ndarray, unk: int, next_token: bool) -> UserData:
    """Tokens outside ``allowed`` become ``unk`` in x (and in the targets of a language model)."""
    x = np.where(allowed[data.x], data.x, unk)
    y = np.where(allowed[data.y], data.y, unk) if next_token else data.y
    return UserData(x=x, y=y, t=data.t, attrs=data.attrs)


def restrict_update(
    global_arrays: dict[str, np.ndarray], local_arrays: dict[str, np.ndarray], allowed: np.ndarray
) -> dict[str, np.ndarray]:
    """Rows of vocabulary-indexed parameters (first axis = vocabulary size) outside ``allowed`` keep the global value."""
    out = dict(local_arrays)
    for key, glob in global_arrays.items():
        if np.issubdtype(glob.dtype, np.floating) and glob.ndim >= 1 and glob.shape[0] == len(allowed):
            mask = allowed.reshape((-1,) + (1,) * (glob.ndim - 1))
            out[key] = keep_global(local_arrays[key], glob, mask)
    return out


def _vocab_k(cfg: ExperimentConfig, fed: Federation, user: str) -> int:
    """The smallest k among the vocab defenses this user adopts (0 = none)."""
    ks = [int(d.strength) for _, d in defenses_of(cfg, fed.user_ids, user) if d.name == "vocab" and d.strength > 0]
    return min(ks) if ks else 0


def restrict_vocabulary(cfg: ExperimentConfig, fed: Federation, user: str, data: UserData) -> UserData:
    """The device's training data under the vocab defense it adopts (unchanged otherwise)."""
    k = _vocab_k(cfg, fed, user)
    if not k:
        return data
    allowed = _allowed(cfg.model_dump_json(), fed.rule, k)
    return restrict_data(data, allowed, unk_id(fed.corpus), fed.corpus.task == "next-token")


def vocab_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Send Δw only on the allowed tokens' rows (adopters of the vocab defense; others pass through)."""
    reply = call_next(msg, context)
    got = train_config(msg, reply)
    if got is None or not any(d.name == "vocab" for d in got[0].defenses):
        return reply
    cfg, conf = got
    fed, user = device_user(cfg, conf, context)
    k = _vocab_k(cfg, fed, user)
    if not k:
        return reply
    return send(reply, restrict_update(*weights(msg, reply), _allowed(cfg.model_dump_json(), fed.rule, k)))
