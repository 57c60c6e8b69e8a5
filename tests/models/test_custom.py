"""rococo_eval.models.custom: any object with encode_images and encode_texts, with its optional hooks, its
fingerprint, and the refusals of what cannot be scored."""

import logging

import numpy as np
import pytest
from PIL import Image

from rococo_eval.models.adapters import ModelError, load_model, parse_model_name
from rococo_eval.models.cache import EmbeddingCache, ItemSet, LazyImages
from rococo_eval.models.custom import CustomModel, as_image_text_model, load_callable


class Plain:
    def __init__(self, scale=1.0):
        self.scale = scale

    def encode_images(self, images):
        return np.array([[image.width * self.scale, image.height, 1.0] for image in images])

    def encode_texts(self, texts):
        return np.array([[len(text) * self.scale, 1.0, 2.0] for text in texts])


class Hooked(Plain):
    def __init__(self):
        super().__init__()
        self.calls = []

    def preprocess_image(self, image):
        self.calls.append("preprocess_image")
        return np.array([image.width, image.height, 1.0], dtype=np.float32)

    def encode_preprocessed(self, batch):
        self.calls.append("encode_preprocessed")
        return batch

    def tokenize_texts(self, texts):
        self.calls.append("tokenize_texts")
        return [len(text) for text in texts]

    def encode_tokenized(self, tokens):
        self.calls.append("encode_tokenized")
        return np.array([[length, 1.0, 2.0] for length in tokens])


class _Hooks:
    """The hooks of a Hooked model, with encode_images and encode_texts there but failing if called."""

    def __init__(self, hooked):
        self.hooked = hooked
        for name in ("preprocess_image", "encode_preprocessed", "tokenize_texts", "encode_tokenized"):
            setattr(self, name, getattr(hooked, name))

    def encode_images(self, images):
        raise AssertionError("encode_images is not to be called")

    def encode_texts(self, texts):
        raise AssertionError("encode_texts is not to be called")


def images(count=5):
    return [Image.new("RGB", (10 + index, 8)) for index in range(count)]


def test_embeddings_are_normalised_float32_rows():
    model = as_image_text_model(Plain())
    vectors = model.encode_texts(["abc", "a"])
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1)
    assert np.allclose(vectors[0], np.array([3, 1, 2]) / np.sqrt(14))


def test_the_hooks_are_what_the_cache_calls(tmp_path):
    """A model with both hook pairs: the cache (and the fingerprint's probe) go through them, never through
    encode_images or encode_texts."""
    hooked = Hooked()
    model = CustomModel(_Hooks(hooked))
    cache = EmbeddingCache(tmp_path, batch_size=2, workers=2)
    pictures = images()
    vectors = cache.embeddings(model, ItemSet("images/x", "image", LazyImages(pictures.__getitem__, 5), "f" * 64))
    texts = cache.embeddings(model, ItemSet("captions/x", "text", ["a", "bb", "ccc"]))
    assert set(hooked.calls) == {"preprocess_image", "encode_preprocessed", "tokenize_texts", "encode_tokenized"}
    assert np.allclose(vectors, as_image_text_model(Plain()).encode_images(pictures))
    assert np.allclose(texts, as_image_text_model(Plain()).encode_texts(["a", "bb", "ccc"]))


def test_half_a_hook_pair_is_not_used(caplog):
    caplog.set_level(logging.WARNING, logger="rococo_eval")  # an earlier command may have set the level
    class Half(Plain):
        def preprocess_image(self, image):
            raise AssertionError("not to be called")

    model = as_image_text_model(Half())
    assert not hasattr(model, "preprocess_image") and "has preprocess_image but not encode_preprocessed" in caplog.text


def test_the_fingerprint_follows_the_model():
    own = Plain()
    own.fingerprint = "v1"
    assert as_image_text_model(own).fingerprint != as_image_text_model(Plain()).fingerprint
    probed = as_image_text_model(Plain()).fingerprint  # no fingerprint: its embeddings of a fixed probe
    assert as_image_text_model(Plain()).fingerprint == probed != as_image_text_model(Plain(scale=2.0)).fingerprint
    import torch

    class Module(torch.nn.Module, Plain):
        def __init__(self):
            torch.nn.Module.__init__(self)
            Plain.__init__(self)
            self.layer = torch.nn.Linear(2, 2)

    first, second = Module(), Module()
    assert as_image_text_model(first).fingerprint != as_image_text_model(second).fingerprint  # other weights
    second.load_state_dict(first.state_dict())
    assert as_image_text_model(first).fingerprint == as_image_text_model(second).fingerprint


@pytest.mark.parametrize("output, problem", [
    (np.zeros(3), "encode_texts returned shape (3,), not (items, dimension)"),
    (np.array([[np.nan, 1.0]]), "encode_texts returned non-finite embeddings"),
    (np.zeros((1, 2)), "encode_texts returned 1 all-zero embedding(s), which have no direction to score"),
])
def test_a_bad_output_is_refused_by_name(output, problem):
    class Bad(Plain):
        fingerprint = "bad"

        def encode_texts(self, texts):
            return output

    with pytest.raises(ValueError, match="model 'Bad': " + problem.replace("(", r"\(").replace(")", r"\)")):
        as_image_text_model(Bad()).encode_texts(["a"])


def test_a_model_without_the_methods_is_refused():
    with pytest.raises(TypeError, match=r"`model` \(object\) has no encode_images and no encode_texts"):
        CustomModel(object())


def test_module_callable_loads_through_load_model(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import numpy as np\n"
        "class M:\n"
        "    def __init__(self, device): self.device = device\n"
        "    def encode_images(self, images): return np.ones((len(images), 2))\n"
        "    def encode_texts(self, texts): return np.ones((len(texts), 2))\n"
        "def make(device=None): return M(device)\n")
    monkeypatch.chdir(tmp_path)
    assert parse_model_name("my_models:make").library == "python"
    model = load_model("my_models:make", device="cpu")
    assert model.name == "my_models:make" and model.model.device == "cpu"
    with pytest.raises(ValueError, match="module 'my_models' has no callable 'other'"):
        load_callable("my_models:other")
    with pytest.raises(ModelError, match="unknown model name 'no_such_module:make'"):
        parse_model_name("no_such_module:make")
    with pytest.raises(ModelError, match="unknown model name 'open_clip:RN50'"):  # a built-in name, mistyped
        parse_model_name("open_clip:RN50")


def test_the_probe_fingerprint_is_stable_across_calls_and_a_callable_fingerprint_is_called():
    assert as_image_text_model(Plain()).fingerprint == as_image_text_model(Plain()).fingerprint
    own = Plain()
    own.fingerprint = lambda: "v2"
    assert as_image_text_model(own).fingerprint != as_image_text_model(Plain()).fingerprint
    own.fingerprint = 3
    with pytest.raises(TypeError, match="`fingerprint` of Plain must be a str, got int"):
        as_image_text_model(own)


def test_a_built_in_model_is_kept_and_only_renamed(blip_name):
    model = load_model(blip_name, device="cpu")
    renamed = as_image_text_model(model, name="my blip")
    assert renamed is model and renamed.name == "my blip" and hasattr(renamed, "match")
