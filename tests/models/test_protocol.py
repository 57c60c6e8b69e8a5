"""rococo_eval.models.protocol: what a scorer reads of a model, checked once by as_image_text_model, and the one
choice of a scorer per model (rococo_eval.scoring.galleries.scorer_for)."""

import numpy as np
import pytest

from rococo_eval.models.cache import EmbeddingCache
from rococo_eval.models.custom import as_image_text_model
from rococo_eval.models.protocol import ImageTextModel, TwoStageModel, missing_members
from rococo_eval.models.similarity import COSINE, DOT
from rococo_eval.scoring.galleries import DualEncoderScorer, RerankScorer, check_saving, scorer_for


class Plain:
    def encode_images(self, images):
        return np.array([[image.width, 1.0] for image in images])

    def encode_texts(self, texts):
        return np.array([[len(text), 1.0] for text in texts])


class TwoStage:
    """Every member of TwoStageModel: ITC by dot products, ITM a fixed function of the pair."""

    name, fingerprint, similarity, device, precision = "two-stage", "0" * 64, COSINE, "cpu", "fp32"
    encode_images = encode_texts = Plain.encode_images

    def itc_scores(self, images, texts):
        return images @ texts.T

    def tokenize(self, texts):
        return np.array([[len(text)] for text in texts])

    def image_features(self, images):
        return np.array(images)

    def match(self, features, positions, tokens):
        return (features[positions] + tokens[:, 0]).astype(np.float32)


def package_model(**members):
    """An object whose class is in rococo_eval.models (as load_model's are), with ``members`` only."""
    cls = type("Packaged", (), {**members, "__module__": "rococo_eval.models.packaged"})
    return cls()


def test_a_custom_model_is_a_whole_image_text_model_and_no_two_stage_one():
    model = as_image_text_model(Plain())
    assert isinstance(model, ImageTextModel) and not isinstance(model, TwoStageModel)
    assert (model.similarity, model.device, model.precision) == (COSINE, None, None)
    assert missing_members(model) == []
    given_an_object = as_image_text_model(type("Dot", (Plain,), {"similarity": DOT})())
    assert given_an_object.similarity is DOT


def test_a_package_model_is_checked_once_and_refused_naming_what_it_lacks():
    members = dict(TwoStage.__dict__)
    whole = package_model(**{key: members[key] for key in ("name", "fingerprint", "similarity", "device",
                                                             "precision", "encode_images", "encode_texts")})
    assert as_image_text_model(whole, "renamed") is whole and whole.name == "renamed"
    lacking = package_model(name="m", fingerprint="f", similarity="dot", encode_images=Plain.encode_images,
                            encode_texts=Plain.encode_texts)
    with pytest.raises(TypeError, match=r"`model` 'm' \(Packaged\) lacks similarity, device, precision of "
                                        r"rococo_eval.models.protocol.ImageTextModel"):
        as_image_text_model(lacking)


def test_one_scorer_is_chosen_per_model(tmp_path):
    cache = EmbeddingCache(tmp_path, batch_size=3, workers=0)
    dual = scorer_for(as_image_text_model(Plain()), cache)
    assert isinstance(dual, DualEncoderScorer) and dual.similarity is COSINE and dual.report_entries() == {}
    two_stage = scorer_for(TwoStage(), cache, k=7)
    assert isinstance(two_stage, RerankScorer) and two_stage.reranker.k == 7
    assert two_stage.reranker.batch_size == 3 and two_stage.reranker.root == tmp_path
    assert two_stage.report_entries() == {"rerank": {"k": 7, "itm_pairs_computed": 0, "itm_pairs_reused": 0}}
    with pytest.raises(ValueError, match="`k` must be a positive int, got 0"):
        scorer_for(TwoStage(), cache, k=0)


def test_what_a_run_saves_is_checked_by_the_kind_of_model(tmp_path):
    check_saving(TwoStage(), save_scores=tmp_path, compact_scores=True)
    with pytest.raises(ValueError, match="`save_embeddings`: two-stage is scored in two stages"):
        check_saving(TwoStage(), save_embeddings=tmp_path / "e.safetensors")
    dot = as_image_text_model(type("Dot", (Plain,), {"similarity": "dot"})())
    assert dot.similarity is DOT
    with pytest.raises(ValueError, match="`compact_scores`: Dot is a dual encoder"):
        DualEncoderScorer(dot).check(save_scores=tmp_path, compact_scores=True)
