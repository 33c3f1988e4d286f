"""Hostile declarations and checks: routes through what an attack declares of its parameters and what its own check
returns (issue 38, items 4 and 8).

On the old code a declaration's params were a JSON Schema that the trusted CLI evaluated with a JSON Schema library:
a ``$ref`` made ``leakbed validate`` fetch a URL (or read a ``file://`` path), and a catastrophic ``pattern`` hung it;
and an attack's check hook saw every prior's knowledge at once, so the params it normalised could carry one prior's
data to the other prior's lanes. Each attack here tries one of those routes:

- ``forged``: declarations rewritten on their way out of the introspection (import-time code wraps the JSON encoder
  of its reply): a ``$ref`` to a URL and to a ``file://`` FIFO, a catastrophic ``pattern``, a huge and a deep params
  table, an enum of 20,000 values, terminal escapes in a field's name;
- ``models``: params models written the normal way that the language cannot hold whole: a catastrophic pattern (the
  model's to check, in the sandbox) and, in ``million``, an enum of a million values;
- ``checks``: check hooks that carry what they saw of their prior into the params, that widen the params past their
  declaration, and that report what they can see.

Nothing runs at import but ``forged``'s patch, and only in the introspection's own process.
"""
