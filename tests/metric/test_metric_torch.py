"""The metric on torch tensors: every dtype and the tensor's own device agree with NumPy."""

import numpy as np
import pytest
import torch

from helpers.metric_cases import BAD_INPUTS, PER_QUERY_KEYS, assert_per_query_equal, embedding_case, random_case
from rococo_recall import rococo_recall as compute


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
def test_torch_inputs_match_numpy(dtype, ties):
    rng = np.random.default_rng(3)
    scores, references, adversarial = random_case(rng, 40, 70, 20, levels=40)
    tensor = torch.from_numpy(scores).to(dtype)
    exact = tensor.to(torch.float64).numpy()
    result = compute(tensor, references, torch.from_numpy(adversarial), ties=ties, chunk_size=9, per_query=True)
    expected = compute(exact, references, adversarial, ties=ties, per_query=True)
    for key in ("recall@1", "recall@10", "false_rate", "clean_recall@5", "attack_success_rate"):
        np.testing.assert_equal(result[key], expected[key])
    assert_per_query_equal(result, {key: expected[key] for key in PER_QUERY_KEYS})


def test_embeddings_equal_scores_torch():
    queries, gallery, references, adversarial, scores = embedding_case()
    expected = compute(scores, references, adversarial, per_query=True)
    queries, gallery = torch.from_numpy(queries), torch.from_numpy(gallery)
    result = compute(query_embeddings=queries, gallery_embeddings=gallery, references=references,
                     adversarial=adversarial, chunk_size=4, per_query=True)
    for key in PER_QUERY_KEYS:  # products of 4 rows may round a score's last bit unlike those of 33 rows
        np.testing.assert_allclose(result[key], expected[key], rtol=1e-6, atol=0, err_msg=key)
        if not key.endswith("score"):
            np.testing.assert_array_equal(result[key], expected[key], err_msg=key)
    assert result["r_mean"] == expected["r_mean"]


def _as_tensor(values):
    """``values`` as a tensor, or None where torch itself cannot build one (ragged lists, strings)."""
    try:
        return torch.tensor(values)
    except (ValueError, TypeError):
        return None


BASE_SCORES = [[0.9, 0.1, 0.5], [0.2, 0.8, 0.1]]
TENSOR_CASES = [(overrides, message) for overrides, message in BAD_INPUTS
                if _as_tensor(overrides.get("predictions", BASE_SCORES)) is not None]


@pytest.mark.parametrize("overrides, message", TENSOR_CASES)
def test_bad_input_is_refused_by_name_torch(overrides, message):
    kwargs = {"predictions": BASE_SCORES, "references": [0, 1], "k": 1, **overrides}
    kwargs["predictions"] = _as_tensor(kwargs["predictions"])
    with pytest.raises(ValueError, match=message):
        compute(**kwargs)
