"""rococo_eval.models.similarity: how a model is scored (cosine, dot, csd), through the custom-model API, the embedding
cache, the embeddings file and evaluate_model, against scores computed by hand."""

import json

import numpy as np
import pytest

from rococo_recall import rococo_recall
from rococo_eval import evaluate_model
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.models.custom import as_image_text_model
from rococo_eval.models.similarity import COSINE, CSD, DOT, SIMILARITIES, normalised, similarity_named, similarity_of
from rococo_eval.scoring.embeddingsfile import (
    read_embeddings_file,
    score_embeddings,
    write_embeddings_file,
    write_embeddings_from_rows,
)


def csd(image_means, image_log_sigmas, text_means, text_log_sigmas):
    """PCME++'s closed-form sampled distance as pcmepp/evaluation.py::compute_csd_sims writes it, in float64."""
    image_means, text_means = np.asarray(image_means, np.float64), np.asarray(text_means, np.float64)
    distance = 2 - 2 * image_means @ text_means.T
    distance = distance + np.exp(np.asarray(image_log_sigmas, np.float64)).sum(-1).reshape(-1, 1)
    distance = distance + np.exp(np.asarray(text_log_sigmas, np.float64)).sum(-1).reshape(1, -1)
    return -distance


class Colours:
    """Images: mean colour and size; texts: hashed letters. ``similarity`` is set per test."""

    def __init__(self, similarity=None):
        if similarity is not None:
            self.similarity = similarity

    def _image_rows(self, images):
        return np.array([[*np.asarray(image.convert("RGB"), dtype=np.float64).mean(axis=(0, 1)) / 255,
                          image.width / 100, 1.0] for image in images])

    def _text_rows(self, texts):
        return np.array([[len(text) / 50, sum(map(ord, text)) % 97 / 97, text.count("a") / 5, 0.3, 1.0]
                         for text in texts])

    def encode_images(self, images):
        rows = self._image_rows(images)
        if getattr(self, "similarity", "cosine") != "csd":
            return rows
        means = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return means, np.log(0.05 + rows[:, :1] * np.ones((1, rows.shape[1])))

    def encode_texts(self, texts):
        rows = self._text_rows(texts)
        if getattr(self, "similarity", "cosine") != "csd":
            return rows
        means = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return means, np.log(0.02 + rows[:, 1:2] * np.ones((1, rows.shape[1])))


def test_csd_rows_score_the_closed_form_sampled_distance():
    """A csd row is the mean and sum(exp(sigma)); the blocks are the distance, text-to-image exactly the transpose of
    image-to-text (the official code ranks images by the transposed image-by-caption matrix), in blocks of any size."""
    rng = np.random.default_rng(0)
    image_means, text_means = rng.normal(size=(7, 5)), rng.normal(size=(9, 5))
    image_means /= np.linalg.norm(image_means, axis=1, keepdims=True)
    text_means /= np.linalg.norm(text_means, axis=1, keepdims=True)
    image_sigmas, text_sigmas = rng.normal(-2, 0.5, (7, 5)), rng.normal(-2, 0.5, (9, 5))
    images = CSD.rows("image", (image_means, image_sigmas), "m")
    texts = CSD.rows("text", (text_means, text_sigmas), "m")
    assert images.shape == (7, 6) and texts.shape == (9, 6) and images.dtype == np.float32
    np.testing.assert_allclose(images[:, -1], np.exp(image_sigmas).sum(1), rtol=1e-6)

    def matrix(queries, gallery, queries_are_images, chunk_size=None):
        return np.concatenate([block for _, block in CSD.blocks(queries, gallery, queries_are_images, chunk_size)])

    i2t = matrix(images, texts, True)
    assert i2t.dtype == np.float32
    np.testing.assert_allclose(i2t, csd(image_means, image_sigmas, text_means, text_sigmas), atol=1e-5)
    np.testing.assert_array_equal(matrix(texts, images, False), i2t.T)
    np.testing.assert_allclose(matrix(images, texts, True, chunk_size=2), i2t, rtol=1e-6)


def test_a_similarity_method_says_nothing_about_how_a_model_is_scored():
    """sentence-transformers models (and this project's re-ranker, once) have a ``similarity`` method: such a model is
    scored by cosine, as before the attribute existed."""
    class WithAMethod(Colours):
        def similarity(self, images, texts):
            return images @ texts.T

    assert similarity_of(WithAMethod()) is COSINE and as_image_text_model(WithAMethod()).similarity is COSINE


def test_dot_rows_are_kept_and_cosine_rows_normalised():
    rows = np.array([[3.0, 4.0], [0.5, 0.0]])
    assert DOT.rows("text", rows, "m").tolist() == [[3.0, 4.0], [0.5, 0.0]]
    assert np.array_equal(COSINE.rows("image", rows, "m"), normalised(rows, "m", "encode_images"))


@pytest.mark.parametrize("similarity, output, problem", [
    ("csd", np.zeros((2, 3)), "encode_texts must return a pair (means, log_sigmas) for the csd similarity, got "
                              "ndarray"),
    ("csd", (np.zeros((2, 3)), np.zeros((2, 4))), "encode_texts returned means of shape (2, 3) and log_sigmas of "
                                                  "shape (2, 4); they must have one shape"),
    ("csd", (np.zeros((2, 3)), np.full((2, 3), np.inf)), "encode_texts (log_sigmas) returned non-finite embeddings"),
    ("dot", np.zeros(3), "encode_texts returned shape (3,), not (items, dimension)"),
])
def test_outputs_that_cannot_be_scored_are_refused_by_name(similarity, output, problem):
    with pytest.raises(ValueError, match=r"model 'm': " + problem.replace("(", r"\(").replace(")", r"\)")):
        similarity_named(similarity).rows("text", output, "m")


def test_an_unknown_similarity_is_refused_naming_the_model():
    with pytest.raises(ValueError, match=r"`similarity` of Colours must be one of \('cosine', 'dot', 'csd'\), got "
                                         r"'euclidean'"):
        as_image_text_model(Colours("euclidean"))


def test_a_cosine_model_keeps_its_rows_and_its_fingerprint():
    """Saying ``cosine`` is saying nothing: the same normalised rows and the same fingerprint (so the same cache) as a
    model that does not say; the other similarities have fingerprints of their own."""
    plain, cosine, dot = (as_image_text_model(Colours(similarity)) for similarity in (None, "cosine", "dot"))
    texts = ["a cat", "two dogs on a mat"]
    assert plain.similarity is COSINE and np.array_equal(plain.encode_texts(texts), cosine.encode_texts(texts))
    assert np.array_equal(plain.encode_texts(texts), normalised(Colours()._text_rows(texts), "m", "encode_texts"))
    assert plain.fingerprint == cosine.fingerprint != dot.fingerprint
    assert np.array_equal(dot.encode_texts(texts), Colours()._text_rows(texts).astype(np.float32))


@pytest.mark.parametrize("similarity", ["dot", "csd"])
def test_evaluate_model_scores_as_the_model_says(similarity, benchmark, tmp_path):
    """Every gallery of a ``dot`` or ``csd`` model equals the metric of the score matrix computed by hand from the
    model's own outputs; the report and the embeddings file say how it was scored, and the file scores the same."""
    source = BenchmarkSource(benchmark)
    model = Colours(similarity)
    report = evaluate_model(model, source, cache_dir=tmp_path / "cache", out=tmp_path / "report",
                            save_embeddings=tmp_path / "model.safetensors")
    images = [source.original_image(index) for index in range(source.num_images)]
    captions = source.ground_truth_captions()
    if similarity == "dot":  # float64, as VSE infinity's official evaluation scores its embeddings
        scores = model._image_rows(images) @ model._text_rows(captions).T
    else:
        scores = csd(*model.encode_images(images), *model.encode_texts(captions))
    layout = source.gallery("clean", "image_to_text")
    expected = rococo_recall(scores, **layout.metric_inputs())
    assert report.results["clean/image_to_text"].metrics["recall@1"] == expected["recall@1"]
    assert report.meta["similarity"] == similarity
    assert json.loads((tmp_path / "report" / "report.json").read_text())["meta"]["similarity"] == similarity
    vectors, metadata, attacks = read_embeddings_file(tmp_path / "model.safetensors", source)
    assert metadata["similarity"] == similarity and metadata["normalized"] == "false"
    rescored = score_embeddings(vectors, source, attacks, metadata["similarity"])
    assert {key: value.metrics["recall@1"] for key, value in rescored.items()} == \
        {key: value.metrics["recall@1"] for key, value in report.results.items()}


def test_embeddings_from_rows_take_pairs_for_csd(benchmark, tmp_path):
    """write_embeddings_from_rows makes csd rows from (means, log_sigmas) pairs, as run makes them from a model."""
    source = BenchmarkSource(benchmark)
    model = Colours("csd")
    images = [source.original_image(index) for index in range(source.num_images)]
    rows = {("images", "test"): model.encode_images(images),
            ("captions", "test"): model.encode_texts(source.ground_truth_captions())}
    write_embeddings_from_rows(tmp_path / "rows.safetensors", rows, source, "colours", similarity="csd")
    vectors, metadata, _ = read_embeddings_file(tmp_path / "rows.safetensors", source)
    assert metadata["similarity"] == "csd"
    wrapped = as_image_text_model(model)
    np.testing.assert_array_equal(vectors["images/original"], wrapped.encode_images(images))
    with pytest.raises(ValueError, match=r"each value of `vectors` must be a pair \(means, log_sigmas\) for the csd similarity, got ndarray"):
        write_embeddings_from_rows(tmp_path / "bad.safetensors", {**rows, ("images", "test"): rows["images", "test"][0]},
                                   source, "colours", similarity="csd")
    assert not (tmp_path / "bad.safetensors").exists()


def test_a_file_with_an_unknown_similarity_is_refused(benchmark, tmp_path):
    source = BenchmarkSource(benchmark)
    rows = {("images", "test"): np.ones((source.num_images, 3)),
            ("captions", "test"): np.ones((len(source.ground_truth_captions()), 3))}
    path = write_embeddings_from_rows(tmp_path / "model.safetensors", rows, source, "m")
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    arrays = load_file(str(path))
    with safe_open(str(path), "np") as handle:
        metadata = dict(handle.metadata(), similarity="euclidean")
    save_file(arrays, str(path), metadata=metadata)
    with pytest.raises(ValueError, match=r"its metadata's `similarity` must be one of \('cosine', 'dot', 'csd'\), "
                                         r"got 'euclidean'"):
        read_embeddings_file(path, source)
    with pytest.raises(ValueError, match="`similarity` of 'm' must be one of"):
        write_embeddings_file(tmp_path / "other.safetensors", arrays, {}, "m", similarity="euclidean")
    assert SIMILARITIES == ("cosine", "dot", "csd")


@pytest.mark.parametrize("name", SIMILARITIES)
def test_each_similarity_owns_its_rows_blocks_dtype_and_width(name):
    """The registry's objects: blocks in the score dtype that equal the full matrix of the rows (for csd, the
    closed-form distance), an output split into its parts and joined back, and the embeddings' width."""
    similarity = similarity_named(name)
    assert similarity.name == name and similarity_named(similarity) is similarity
    rng = np.random.default_rng(1)
    parts = [rng.normal(size=(5, 3)) for _ in similarity.parts]
    output = similarity.joined(parts)
    assert [np.array_equal(a, b) for a, b in zip(similarity.split(output, "`x`"), parts)] == [True] * len(parts)
    assert similarity.embedding_width(3 * len(similarity.parts)) == 3
    images = similarity.rows("image", output, "m")
    texts = similarity.rows("text", similarity.joined([rng.normal(size=(4, 3)) for _ in similarity.parts]), "m")
    blocks = list(similarity.blocks(images, texts, queries_are_images=True, chunk_size=2))
    assert [start for start, _ in blocks] == [0, 2, 4]
    assert {block.dtype for _, block in blocks} == {np.dtype(similarity.score_dtype)}
    matrix = np.concatenate([block for _, block in blocks])
    if name == "csd":
        expected = -(2 - 2 * images[:, :-1].astype(np.float64) @ texts[:, :-1].T + images[:, -1:] + texts[:, -1])
    else:
        expected = images.astype(np.float64) @ texts.T.astype(np.float64)
    np.testing.assert_allclose(matrix, expected, rtol=1e-5, atol=1e-6)
