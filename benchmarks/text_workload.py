"""The held-out text workload: a local table of 50 authors x 1,000 sentences, for ``leakbed/configs/text-50.toml``.

``python -m benchmarks.text_workload [--authors 50] [--sentences 1000] [--out runs/data/text-50.jsonl] [--seed 0]``

No download: a seeded generator writes a JSONL table in the format of ``core.data.table`` (docs/tutorials/own-data.md):
``user_id``, ``timestamp`` (the sentence's day, so a chrono prior means "the attacker knows the author's past") and
``text``, no label, so the table loader builds a next-word language-model task and ``model.name = "auto"`` picks the
seeds' LSTM language model (embedding 100, LSTM 64, vocabulary 5,000; seed 001 §5.1, the blog corpus split into
sentences). Every author has a signal a re-identification attack can find: the topics they write about (3 of 24, each
with its own 150 words, drifting slowly over their timeline), their own pet words (40 each) and their own mix of the
language's common words; 6,000 distinct words in all, so the 5,000-word vocabulary cuts the rarest.

The same arguments write the same bytes (the seed fixes every choice).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path("runs/data/text-50.jsonl")  # where leakbed/configs/text-50.toml reads it (runs/ is not committed)
COMMON, TOPICS, TOPIC_WORDS, OWN_WORDS = 300, 24, 150, 40
SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"] + ["th" + v for v in "aeiou"] + ["sh" + v for v in "aeiou"]


def _words(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    """``n`` new pronounceable words (2-4 syllables), none of ``taken`` (which grows)."""
    out: list[str] = []
    while len(out) < n:
        word = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5))))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def _zipf(rng: np.random.Generator, n: int, a: float = 1.1) -> np.ndarray:
    """Zipf-like probabilities over ``n`` words in a random rank order."""
    p = 1.0 / np.arange(1, n + 1) ** a
    return rng.permutation(p / p.sum())


def rows(authors: int = 50, sentences: int = 1000, seed: int = 0) -> list[dict]:
    """The table's rows: ``authors`` x ``sentences``, in author order, each author's sentences in time order."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    common = _words(rng, COMMON, taken)
    common_p = _zipf(rng, COMMON, 1.0)
    topics = [_words(rng, TOPIC_WORDS, taken) for _ in range(TOPICS)]
    topic_p = [_zipf(rng, TOPIC_WORDS) for _ in range(TOPICS)]
    out: list[dict] = []
    for a in range(authors):
        liked = rng.choice(TOPICS, size=3, replace=False)
        weights = rng.dirichlet(np.full(3, 2.0))  # how much of each liked topic, drifting over time
        drift = rng.dirichlet(np.full(3, 2.0))
        own = _words(rng, OWN_WORDS, taken)
        own_p = _zipf(rng, OWN_WORDS)
        style = rng.dirichlet(np.full(COMMON, 0.5)) * 0.3 + common_p * 0.7  # the author's own mix of common words
        own_rate = rng.uniform(0.05, 0.15)
        day = 0.0
        for s in range(sentences):
            mix = (1 - s / sentences) * weights + (s / sentences) * drift
            topic = int(rng.choice(liked, p=mix)) if rng.random() < 0.9 else int(rng.integers(TOPICS))
            length = int(np.clip(rng.normal(14, 5), 4, 31))  # words; a sentence fits data.seq_len = 32
            kind = rng.random(length)
            mine, about = kind < own_rate, (kind >= own_rate) & (kind < own_rate + 0.4)
            picks = {
                "own": iter(rng.choice(OWN_WORDS, size=int(mine.sum()), p=own_p)),
                "topic": iter(rng.choice(TOPIC_WORDS, size=int(about.sum()), p=topic_p[topic])),
                "common": iter(rng.choice(COMMON, size=int(length - mine.sum() - about.sum()), p=style)),
            }
            words = [
                own[next(picks["own"])] if m else topics[topic][next(picks["topic"])] if t else common[next(picks["common"])]
                for m, t in zip(mine, about, strict=True)
            ]
            day += float(rng.exponential(1.0))
            out.append({"user_id": f"author{a:03d}", "timestamp": round(day, 4), "text": " ".join(words) + "."})
    return out


def write(path: Path, authors: int = 50, sentences: int = 1000, seed: int = 0) -> int:
    """Write the table to ``path`` (atomically); returns its rows."""
    table = rows(authors, sentences, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in table:
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return len(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.text_workload", description=__doc__.split("\n\n")[0])
    p.add_argument("--authors", type=int, default=50, help="users (default 50)")
    p.add_argument("--sentences", type=int, default=1000, help="sentences per author (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSONL table (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    n = write(args.out, args.authors, args.sentences, args.seed)
    print(f"{args.out}: {n} rows ({args.authors} authors x {args.sentences} sentences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
