"""Why devices' replies failed, grouped by kind: what the console and the report say about failed replies.

A run files each failed or rejected reply's reason as the server saw it (``replies.why`` in a prior's metrics.json,
counted by exact text). Flower wraps a ClientApp's exception as ``<class 'ray.exceptions.ActorDiedError'>:<'...'>``
and Ray's text names the actor, its process, its node and its worker by id, so three replies that failed alike are
three different texts. ``failure_kinds`` reads each as one kind (the exception's class and its message's first
sentence, without ids, process numbers or addresses) and counts the kinds; ``failure_text`` words them for a line.
The reasons may carry a device's (or an attack plugin's) words: the caller escapes the result for where it goes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["failure_kind", "failure_kinds", "failure_text", "limit_text", "share_text"]

FLOWER_WRAPPED = re.compile(r"^<class '(?:[\w.]*\.)?(\w+)'>:<'(.*?)'?>?$", re.S)  # Flower's str(type(ex)) + ":<'" + str(ex)
_IDS = (
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),  # a UUID
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I),  # an actor, worker, job or node id
    re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"),  # an IPv4 address (and port)
    re.compile(r"(?i)\b(pid|actor[ _]id|worker[ _]id|node[ _]id|job[ _]id|ID)([=: ]+)\S+?(?=[,;)\s]|$)"),
)
_SENTENCE = re.compile(r"(?<=[.!?])\s|\n")
KINDS_SHOWN = 3  # kinds named in one line; the rest counted


def _scrub(text: str) -> str:
    """``text`` without what differs between failures of one kind: ids, process numbers, addresses."""
    for pattern in _IDS:
        if pattern.groups == 2:
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}…", text)
        else:
            text = pattern.sub("…", text)
    return " ".join(text.split())


def failure_kind(reason: str) -> tuple[str, str]:
    """``(verb, kind)`` of one stored reason: ``failed`` or ``rejected`` (its ``error: `` / ``rejected: `` prefix), and
    what failed: Flower's wrapped exception as ``ActorDiedError: <its first sentence>``, any other text's first
    sentence, without ids."""
    text = str(reason).strip()
    verb = "failed"
    for prefix, said in (("error:", "failed"), ("rejected:", "rejected")):
        if text.startswith(prefix):
            verb, text = said, text[len(prefix) :].strip()
            break
    wrapped = FLOWER_WRAPPED.match(text)
    if wrapped:
        cls, message = wrapped.group(1), wrapped.group(2).strip()
        first = _SENTENCE.split(message, maxsplit=1)[0].strip().rstrip(".") if message else ""
        return verb, f"{cls}: {_scrub(first)}" if first else cls
    first = _SENTENCE.split(text, maxsplit=1)[0].strip().rstrip(".")
    return verb, _scrub(first) or "no reason given"


def failure_kinds(why: dict[str, int]) -> list[tuple[int, str, str]]:
    """``replies.why`` (reason → count) as ``(count, verb, kind)``, one per kind, the most frequent first (ties in
    the order first seen)."""
    counts: dict[tuple[str, str], int] = {}
    for reason, n in why.items():
        key = failure_kind(reason)
        counts[key] = counts.get(key, 0) + int(n)
    return [(n, verb, kind) for (verb, kind), n in sorted(counts.items(), key=lambda kv: -kv[1])]


def failure_text(why: dict[str, int], words: Callable[[str], str] = str) -> str:
    """The kinds in one phrase: ``3 failed: ActorDiedError: The actor died unexpectedly before finishing this task;
    1 rejected: ...``, at most ``KINDS_SHOWN`` of them and how many more; ``words`` escapes a kind for its place."""
    kinds = failure_kinds(why)
    shown = [f"{n} {verb}: {words(kind)}" for n, verb, kind in kinds[:KINDS_SHOWN]]
    if len(kinds) > KINDS_SHOWN:
        rest = sum(n for n, _, _ in kinds[KINDS_SHOWN:])
        shown.append(f"{rest} more of {len(kinds) - KINDS_SHOWN} other kinds")
    return "; ".join(shown)


def share_text(share: float) -> str:
    """A share of replies in percent, one decimal (``7.5%``): the same figure wherever a run's failed share is said."""
    return f"{100 * share:.1f}%"


def limit_text(share: float) -> str:
    """A configured limit (``fl.max_failed_share``) in percent as it was given (``0%``, ``10%``, ``2.5%``)."""
    return f"{100 * share:g}%"
