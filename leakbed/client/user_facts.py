"""Per-user facts a device reports in its sealed truth record for the re-identification suite.

The profile attack (seed 001 §5.2.2, Figure 5) is scored against the share of each class in the
device's own data (``label-share``); attribute inference (§6.1.3, Table 4) against the device's
value of each attribute column (``attr-<name>``: the majority value of its own examples). Facts
describe the user's private data, not what a defense substituted.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.data.corpus import Corpus, UserData


def user_facts(data: UserData, corpus: Corpus) -> dict[str, object]:
    out: dict[str, object] = {}
    if corpus.task == "multiclass" and len(data):
        out["label-share"] = (np.bincount(data.y, minlength=corpus.num_classes) / len(data)).astype(float).tolist()
    for name, col in sorted(data.attrs.items()):
        if len(col) and np.issubdtype(np.asarray(col).dtype, np.number):
            uniq, counts = np.unique(col, return_counts=True)
            out[f"attr-{name}"] = float(uniq[np.argmax(counts)])
    return out
