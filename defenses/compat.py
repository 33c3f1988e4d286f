"""Which defenses a run's data and model admit, checked before anything starts."""

from __future__ import annotations

from torch import nn

from core.config import ExperimentConfig
from core.data.corpus import Corpus


def check_defenses(cfg: ExperimentConfig, corpus: Corpus, model: nn.Module) -> None:
    """Raise a one-line ValueError naming the defense that cannot apply."""
    for i, d in enumerate(cfg.defenses):
        if d.name == "dp-fedavg" and cfg.fl.secure_aggregation == "secagg+":  # its noise is the server wrapper's
            raise ValueError(
                f"defenses.{i}: dp-fedavg needs Flower's server-side DP wrapper, which the legacy SecAgg+ workflow "
                "does not take; with fl.secure_aggregation = 'secagg+' use local-dp"
            )
        if d.name == "vocab" and corpus.vocab is None:
            raise ValueError(f"defenses.{i}: vocab needs token data (text); corpus {corpus.name} has none")
        if d.name in ("dp-fedavg", "local-dp", "norm-clip"):
            ints = [k for k, v in model.state_dict().items() if not v.is_floating_point()]
            if ints:
                raise ValueError(
                    f"defenses.{i}: {d.name} clips the whole model with Flower's Mods, which needs floating-point "
                    f"state only; this model has integer buffers ({ints[0]}): use model.name = cnn or an LSTM"
                )
    users = len(corpus.users)
    total = cfg.fl.rounds * min(users, max(int(users * cfg.fl.fraction_train), 1))
    if cfg.shuffler.batch_min > total:
        raise ValueError(
            f"shuffler.batch_min {cfg.shuffler.batch_min} exceeds the run's {total} updates (rounds x devices per round): "
            "the shuffler would never release one"
        )
