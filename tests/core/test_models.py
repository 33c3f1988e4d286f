import numpy as np
import pytest
import torch

from leakbed.core.config import ModelConfig
from leakbed.core.data.corpus import Corpus
from leakbed.core.models import attack_keys, build_model, final_linear

IMG = Corpus("img", "multiclass", 7, (3, 32, 32), {})
GRAY = Corpus("gray", "multiclass", 62, (1, 28, 28), {})
TEXT = Corpus("txt", "next-token", 90, (20,), {})
LABELLED_TEXT = Corpus("rev", "multiclass", 5, (20,), {}, vocab=tuple(f"w{i}" for i in range(300)))


@pytest.mark.parametrize(
    "name,corpus,final,out_shape",
    [
        ("cnn", IMG, "fc2", (2, 7)),
        ("cnn", GRAY, "fc2", (2, 62)),
        ("mobilenet_v3_small", IMG, "classifier.3", (2, 7)),
        ("resnet18", GRAY, "fc", (2, 62)),
        ("lstm-lm", TEXT, "fc", (2, 20, 90)),
        ("lstm-classifier", LABELLED_TEXT, "fc", (2, 5)),
    ],
)
def test_models_and_their_final_layer(name, corpus, final, out_shape):
    model = build_model(ModelConfig(name=name), corpus).eval()
    x = torch.rand(2, *corpus.input_shape) if len(corpus.input_shape) == 3 else torch.randint(0, 90, (2, 20))
    assert tuple(model(x).shape) == out_shape
    assert final_linear(model) == final
    assert attack_keys(model, ["final"]) == [f"{final}.weight", f"{final}.bias"]


def test_seed_sizes_of_the_language_model():
    model = build_model(ModelConfig(name="lstm-lm"), Corpus("t", "next-token", 5000, (10,), {}))
    assert model.embedding.weight.shape == (5000, 100) and model.lstm.hidden_size == 64 and model.fc.out_features == 5000


def test_auto_choice_and_mismatch():
    assert type(build_model(ModelConfig(), IMG)).__name__ == "SmallCNN"
    assert type(build_model(ModelConfig(), TEXT)).__name__ == "LSTMLanguageModel"
    with pytest.raises(ValueError, match="needs image data"):
        build_model(ModelConfig(name="resnet18"), TEXT)


def test_layer_prefixes_select_parameters():
    model = build_model(ModelConfig(name="cnn"), IMG)
    assert attack_keys(model, ["features.0"]) == ["features.0.weight", "features.0.bias"]
    with pytest.raises(ValueError, match="match no parameter"):
        attack_keys(model, ["nope"])


def test_local_weights_are_loaded(tmp_path):
    torch.manual_seed(3)
    src = build_model(ModelConfig(name="mobilenet_v3_small"), IMG)
    path = tmp_path / "weights.pt"
    torch.save(src.state_dict(), path)
    torch.manual_seed(4)
    loaded = build_model(ModelConfig(name="mobilenet_v3_small", weights_path=str(path)), IMG)
    assert all(
        np.array_equal(a.numpy(), b.numpy()) for a, b in zip(src.state_dict().values(), loaded.state_dict().values(), strict=True)
    )
