"""Model builders and the choice of parameters that represent an update for the attacks.

Seed 001 §5.1: MobileNet for images, an LSTM language model (embedding 100, LSTM 64, vocabulary
5000) for text, an LSTM sentiment model (embedding 50, LSTM 128, vocabulary 1000); §6 represents
an update by the final fully-connected layer, flattened and L2-normalised.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from leakbed.core.config import ConfigError, ModelConfig
from leakbed.core.data.corpus import Corpus


class SmallCNN(nn.Module):
    """Two conv blocks and two FC layers: the quick image model."""

    def __init__(self, channels: int, size: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 32 * (size // 4) * (size // 4)
        self.fc1 = nn.Linear(flat, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.flatten(self.features(x), 1)
        return self.fc2(torch.relu(self.fc1(h)))


class LSTMLanguageModel(nn.Module):
    """Next-token model: embedding, one LSTM layer, FC over the vocabulary (seed 001 §5.1 iii)."""

    def __init__(self, vocab: int, embed: int = 100, hidden: int = 64) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))
        return self.fc(out)  # (B, L, V)


class LSTMClassifier(nn.Module):
    """Text classifier over the last LSTM state (seed 001 §5.1 iv: embedding 50, LSTM 128)."""

    def __init__(self, vocab: int, num_classes: int, embed: int = 50, hidden: int = 128) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed, padding_idx=0)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(self.embedding(x))
        return self.fc(h[-1])


def _torchvision(name: str, channels: int, num_classes: int) -> nn.Module:
    from torchvision import models

    if name == "mobilenet_v3_small":
        net = models.mobilenet_v3_small(weights=None, num_classes=num_classes)
        first = net.features[0][0]
        if channels != 3:
            net.features[0][0] = nn.Conv2d(channels, first.out_channels, 3, 2, 1, bias=False)
        return net
    net = models.resnet18(weights=None, num_classes=num_classes)
    if channels != 3:
        net.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
    return net


def resolve_name(cfg: ModelConfig, corpus: Corpus) -> str:
    """``auto`` picks the quick CNN for images, the LSTM LM for next-token, the LSTM classifier for text labels."""
    if cfg.name != "auto":
        return cfg.name
    if corpus.task == "next-token":
        return "lstm-lm"
    return "cnn" if len(corpus.input_shape) == 3 else "lstm-classifier"


def build_model(cfg: ModelConfig, corpus: Corpus) -> nn.Module:
    """A fresh model for the corpus; seeded by the caller's torch RNG; optional local weights."""
    name = resolve_name(cfg, corpus)
    image = len(corpus.input_shape) == 3
    if name in ("cnn", "mobilenet_v3_small", "resnet18") and not image:
        raise ValueError(f"model {name} needs image data, corpus {corpus.name} is {corpus.task}")
    if name in ("lstm-lm", "lstm-classifier") and image:
        raise ValueError(f"model {name} needs token data, corpus {corpus.name} has images")
    if name == "cnn":
        c, h, _ = corpus.input_shape
        model: nn.Module = SmallCNN(c, h, corpus.num_classes)
    elif name == "lstm-lm":
        model = LSTMLanguageModel(corpus.num_classes)
    elif name == "lstm-classifier":
        vocab = len(corpus.vocab) if corpus.vocab else 5000
        model = LSTMClassifier(vocab, corpus.num_classes)
    else:
        model = _torchvision(name, corpus.input_shape[0], corpus.num_classes)
    if cfg.weights_path:
        model.load_state_dict(read_weights(cfg.weights_path, model))
    return model


def read_weights(path: str, model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict at ``path``, checked against ``model``: a wrong file is a one-line ConfigError
    naming model.weights_path when the model is built (preflight), not a traceback in a Ray actor."""
    where = f"model.weights_path = {path!r}"
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{where}: no such file")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises pickle, zip and runtime errors alike for a file it cannot read
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"{where}: not a torch state dict ({reason[:120]})") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ConfigError(f"{where}: holds a {type(state).__name__}, not a state dict of name -> tensor")
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        what = f"missing {missing[0]!r}" if missing else f"unexpected {unexpected[0]!r}"
        more = len(missing) + len(unexpected) - 1
        raise ConfigError(f"{where}: keys do not fit the built model ({what}{f', +{more} more' if more else ''})")
    for k, v in own.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise ConfigError(f"{where}: {k} has shape {tuple(state[k].shape)}, the built model needs {tuple(v.shape)}")
    return state


def final_linear(model: nn.Module) -> str:
    """Name of the last nn.Linear in module order: the seeds' 'final FC layer'."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        raise ValueError("model has no fully-connected layer")
    return names[-1]


def attack_keys(model: nn.Module, layers: list[str]) -> list[str]:
    """State-dict keys that represent an update: 'final' or parameter-name prefixes, in model order."""
    prefixes = [final_linear(model) + "." if layer == "final" else layer for layer in layers]
    keys = [k for k, _ in model.named_parameters() if any(k == p or k.startswith(p) for p in prefixes)]
    if not keys:
        raise ValueError(f"model.attack_layers {layers} match no parameter")
    return keys
