"""Parity with the official BLIP evaluation (issue 21): the official code and the project score the same model alike.

The official code (``../shared/reference/rococo-official``, pseulki/rococo at d8ba2a6) runs unchanged in the reference
environment, ``.venv-reference`` (the Makefile builds it; ``make test`` requires it: ROCOCO_REQUIRE_REFERENCE=1),
through ``tests/helpers/blip_official_run.py``: it builds a small model of the
official ``BLIP_Retrieval`` class (BLIP base's structure: ViT with 16-pixel patches at 384 x 384, BERT with
cross-attention in every layer, narrower and shallower, every parameter seeded random), saves it as BLIP saves its
checkpoints, and runs the official ``evaluation()`` and ``itm_eval`` of ``eval_blip_i2t.py`` and ``eval_blip_t2i.py``
at ``k_test`` below and at the gallery size.

The data is RoCOCO's: :func:`helpers.official_set.make_official_set` (the captions of ten real test images, generated
JPEGs and their ``mix`` copies), read by the project as a generated benchmark folder.

The project loads the checkpoint through ``--model blip:PATH.pth`` and through the folder that
``python -m rococo_eval.models.blip_official`` writes (``--model hf:OUT_DIR``), runs ``rococo-eval run
--save-scores`` at the same k, and must give:

- the official matrices within :data:`SCORE_TOLERANCE` on every re-ranked entry, the same -100 entries elsewhere;
- identical R@1, R@5, R@10 and false rates through the official ``itm_eval``;
- the official test transform's pixels within :data:`PIXEL_TOLERANCE`;
- the official ``pre_caption`` of every caption of the five annotation files, the official token ids, and ``[ENC]``
  (BLIP's id, the last of the vocabulary) first in every ITM pass.

The checkpoint's folder (the checkpoint, its settings file and vocabulary, what a Hub repository of an official
checkpoint holds), served by the tests' fake Hub, is run as ``--model blip:hf-hub:ORG/REPO/PATH.pth`` and evaluated by
the board's worker: the matrices and numbers of ``blip:PATH.pth``.
"""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import PIL
import pytest

from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.records import SUMMARY_NUMBERS, read_record
from rococo_eval.board.requests import RequestQueue
from rococo_eval.board.worker import Worker
from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.cli import main
from rococo_eval.data.annotations import read_annotation_file
from rococo_eval.data.source import open_source
from rococo_eval.io.download import sha256_of
from rococo_eval.io.savedscores import score_file_name
from rococo_eval.models import blip_official
from rococo_eval.models.adapters import ModelError, load_model
from rococo_eval.models.blip import BLIP_MAX_WORDS, pre_caption
from rococo_eval.models.checkpoints import CheckpointError
from rococo_eval.scoring.rerank import FILL
from helpers.fake_hub import make_default_hub
from helpers.official_set import (
    ATTACK,
    GRAYSCALE,
    IMAGE_ATTACK,
    IMAGE_INDICES,
    STAND_INS,
    make_official_set,
    official_itm_eval,
    require_reference_env,
    run_reference,
)

SMALL_K, FULL_K = 16, 101  # k_test below both galleries (101 texts, 20 images), and the largest (clipped to each)
MODEL = {"seed": 0, "image_size": 384, "embed_dim": 32, "queue_size": 64,
         "vision": {"patch_size": 16, "width": 64, "depth": 2, "heads": 4},
         "text": {"width": 48, "depth": 2, "heads": 4, "max_positions": 64}}
# Tolerances, fp32. Scores are ITM logit + ITC (a few units); the two sides compute them with different kernels
# (the official ViT, BERT and heads against transformers'), so they differ in the last bits.
SCORE_TOLERANCE = 1e-5  # measured: at most 4.3e-6 (2026-12-01)
PIXEL_TOLERANCE = 1e-6  # normalised pixels in [-1.8, 2.2]: the same PIL resize, then /255 and normalisation (measured:
# equal, 0.0)
HUB_REPO, HUB_REQUESTS, HUB_RESULTS = "org/blip-small", "org/requests", "org/board"  # the fake Hub's repositories


def run_blip_reference(command: str, task: dict, folder: Path):
    """The BLIP runner in the reference environment, its stand-ins first on the path."""
    return run_reference("blip_official_run.py", command, task, folder, path=[STAND_INS])


@pytest.fixture(scope="module")
def reference_python():
    return require_reference_env("rococo-official")


def _vocabulary(texts: list[str]) -> list[str]:
    """A BERT vocabulary for these captions: BERT's special tokens, two punctuation marks (others, such as ``-``, are
    [UNK]), letters as word starts and as word pieces, and the words but one in four (those split into pieces). The
    words of
    long captions are all kept, so that every caption fits BLIP's 35 tokens (a truncated caption would tie with its
    adversarial copy whose changed word falls past token 35)."""
    words = sorted({word for text in texts for word in re.findall("[a-z]+", text)})
    kept = {word for text in texts if len(text.split()) > 20 for word in re.findall("[a-z]+", text)}
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "/"] + pieces + ["##" + p for p in pieces]
              + [word for number, word in enumerate(words) if number % 4 or word in kept])
    return list(dict.fromkeys(tokens))


@pytest.fixture(scope="module")
def case(tmp_path_factory, annotations_dir, reference_python):
    """The small RoCOCO set on both sides, the checkpoint, and the official run's outputs."""
    root = tmp_path_factory.mktemp("blip-official")
    official_set = make_official_set(root, annotations_dir)
    clean, attacked, source, benchmark = official_set.clean, official_set.attacked, official_set.source, \
        official_set.benchmark
    work = root / "reference"
    texts = [pre_caption(caption, 30) for record in attacked for caption in record["caption"]]
    vocabulary = _vocabulary(texts)
    (work / "bert-base-uncased").mkdir(parents=True)  # what init_tokenizer's from_pretrained('bert-base-uncased') reads
    (work / "bert-base-uncased" / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    checkpoints = root / "checkpoints"
    checkpoints.mkdir()
    checkpoint = checkpoints / "model_small_retrieval_coco.pth"
    (checkpoints / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    (checkpoints / "model_small_retrieval_coco.json").write_text(json.dumps(
        {"vision_num_attention_heads": MODEL["vision"]["heads"], "text_num_attention_heads": MODEL["text"]["heads"],
         "tokenizer": "vocab.txt"}))

    model = json.loads(json.dumps(MODEL))
    model["text"]["vocab_size"] = len(vocabulary) + 2  # with [DEC] and [ENC]
    task = {**official_set.itm_eval_task(), "work": str(work), "out": str(work / "out"),
            "checkpoint": str(checkpoint), "model": model,
            "k_test": {"i2t": [SMALL_K, len(texts)], "t2i": [SMALL_K, 2 * len(clean)]},
            "caption_files": [str(Path(annotations_dir) / f"{name}.json") for name in
                              ("coco_karpathy_test",) + TEXT_ATTACKS]}
    run_blip_reference("evaluate", task, work)
    summary = json.loads((work / "out" / "reference.json").read_text())
    if summary["versions"]["PIL"] != PIL.__version__:  # Pillow 13.0 resizes portrait images up to 5/255 apart from 12.3
        pytest.fail(f"the reference environment has Pillow {summary['versions']['PIL']}, this one {PIL.__version__}: "
                    f"both must decode and resize the same pixels; rebuild it (make reference-env)")
    with np.load(work / "out" / "reference.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    return {"root": root, "set": official_set, "task": task, "benchmark": benchmark, "source": source,
            "checkpoint": checkpoint, "arrays": arrays, "summary": summary, "work": work, "num_texts": len(texts)}


def _project_run(case, model: str, name: str, k: int) -> dict:
    """``rococo-eval run`` of ``model`` on the benchmark at ``--rerank-k k``; its saved matrices as the reference
    runner names them."""
    folder = case["root"] / "project" / name / f"k{k}"
    status = main(["run", "--model", model, "--benchmark", str(case["benchmark"]), "--attacks",
                   f"{ATTACK},{IMAGE_ATTACK}", "--rerank-k", str(k), "--device", "cpu", "--workers", "0",
                   "--cache-dir", str(case["root"] / "project" / name / "cache"), "--save-scores",
                   str(folder / "scores"), "--out", str(folder / "report"), "--quiet"])
    assert status == 0
    i2t = np.load(folder / "scores" / score_file_name(ATTACK, "image_to_text"))
    t2i = np.load(folder / "scores" / score_file_name(IMAGE_ATTACK, "text_to_image"))
    return {f"i2t_k{min(k, i2t.shape[1])}": i2t, f"t2i_k{min(k, t2i.shape[1])}": t2i}


@pytest.fixture(scope="module")
def converted(case):
    """The folder users load: ``python -m rococo_eval.models.blip_official PATH.pth OUT_DIR``."""
    out = case["root"] / "converted"
    assert blip_official.main([str(case["checkpoint"]), str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def project(case, converted):
    """The project's matrices at both k, through ``blip:PATH.pth`` and through the converted folder."""
    runs = {}
    for name, model in (("blip", f"blip:{case['checkpoint']}"), ("hf", f"hf:{converted}")):
        runs[name] = {}
        for k in (SMALL_K, FULL_K):
            runs[name].update(_project_run(case, model, name, k))
    return runs


@pytest.fixture(scope="module")
def official_itm_eval_of_project(case, project):
    """The official ``itm_eval`` (both scripts) of every project matrix, run in the reference environment."""
    matrices = {f"{key}@{name}": matrix for name, run in project.items() for key, matrix in run.items()}
    return official_itm_eval(case["set"], matrices, case["root"] / "project" / "itm-eval")


def _reranked(matrix: np.ndarray) -> np.ndarray:
    return matrix != FILL


def test_score_matrices_equal_the_official_ones(case, project):
    """Every entry the official evaluation re-ranked is within SCORE_TOLERANCE; every other entry is -100 on both
    sides (the same top-k candidates), in both directions at both k."""
    reference = case["arrays"]
    for name, run in project.items():
        assert sorted(run) == sorted(key for key in reference if key[-1].isdigit())
        for key, matrix in run.items():
            official = reference[key]
            assert matrix.shape == official.shape and matrix.dtype == np.float32
            np.testing.assert_array_equal(_reranked(matrix), _reranked(official), err_msg=f"{name} {key}")
            k = int(key.split("_k")[1])
            assert (_reranked(official).sum(axis=1) == k).all()
            np.testing.assert_allclose(matrix, official, rtol=0, atol=SCORE_TOLERANCE, err_msg=f"{name} {key}")


def test_official_itm_eval_of_the_project_matrices_is_identical(case, official_itm_eval_of_project):
    reference = case["summary"]["itm_eval"]
    assert len(official_itm_eval_of_project) == 8
    for key, result in official_itm_eval_of_project.items():
        direction, k = key.split("@")[0].split("_k")
        assert result == reference[direction][k], key


def test_the_converted_folder_scores_as_blip_path(project):
    for key, matrix in project["blip"].items():
        np.testing.assert_array_equal(matrix, project["hf"][key], err_msg=key)


def test_the_checkpoint_in_a_hub_repository_scores_as_blip_path_for_run_and_the_board(case, project, fake_hub,
                                                                                         monkeypatch, tmp_path):
    """The checkpoint folder (the checkpoint, its settings file, the vocabulary they name), served as a Hub
    repository: ``run --model blip:hf-hub:ORG/REPO/PATH.pth`` saves the matrices of ``blip:PATH.pth`` bit for bit and
    reports its numbers; a board request of that name, evaluated by the worker at the repository's commit (every
    candidate re-ranked, as at FULL_K), records the numbers of ``blip:PATH.pth`` at FULL_K: its cache a copy of that
    run's, which it reads as the same model's (the fingerprint is the checkpoint's), so it computes nothing again.

    The run is at SMALL_K in an empty cache, as ``blip:PATH.pth``'s first run: the last bits of an ITM score depend on
    the pairs batched with it, so a run at FULL_K in an empty cache differs from ``blip:PATH.pth``'s FULL_K run (whose
    cache held the SMALL_K pairs) by up to 2e-6 relative (measured 2026-12-05)."""
    repository = case["checkpoint"].parent
    commit = fake_hub.put_model(HUB_REPO, {path.name: path.read_bytes() for path in repository.iterdir()})
    fake_hub.files[HUB_REQUESTS], fake_hub.files[HUB_RESULTS] = {}, {}
    make_default_hub(fake_hub, monkeypatch, tmp_path / "hf-cache")
    name = f"blip:hf-hub:{HUB_REPO}/{case['checkpoint'].name}"
    for key, matrix in _project_run(case, name, "hub", SMALL_K).items():
        np.testing.assert_array_equal(matrix, project["blip"][key], err_msg=key)
    reports = {(which, k): json.loads((case["root"] / "project" / which / f"k{k}" / "report" / "report.json")
                                      .read_text()) for which, k in (("hub", SMALL_K), ("blip", SMALL_K),
                                                                     ("blip", FULL_K))}
    assert reports["hub", SMALL_K]["results"] == reports["blip", SMALL_K]["results"]
    assert reports["hub", SMALL_K]["summary"] == reports["blip", SMALL_K]["summary"]

    assert RequestQueue(HUB_REQUESTS, endpoint=fake_hub.url).submit(name)["commit"] == commit
    shutil.copytree(case["root"] / "project" / "blip" / "cache", tmp_path / "worker" / "cache")
    worker = Worker(RequestQueue(HUB_REQUESTS, endpoint=fake_hub.url),
                    HubRecords(HUB_RESULTS, tmp_path / "results", endpoint=fake_hub.url, timeout_s=30),
                    open_source(benchmark=case["benchmark"]), tmp_path / "worker", device="cpu",
                    attacks=f"{ATTACK},{IMAGE_ATTACK}")
    ended = worker.step()
    assert ended["status"] == "done", ended["reason"]
    (record,) = [read_record(data, None, path) for path, data in fake_hub.files[HUB_RESULTS].items()]
    assert record["model"] == name and record["provenance"]["model_commit"] == commit
    assert record["provenance"]["weight_files"] == {case["checkpoint"].name: sha256_of(case["checkpoint"])}
    rows = [row for row in reports["blip", FULL_K]["summary"] if "seeds" not in row]
    assert sorted(record["galleries"]) == sorted(f"{row['attack']}/{row['direction']}" for row in rows)
    for row in rows:
        numbers = record["galleries"][f"{row['attack']}/{row['direction']}"]
        shared = [key for key in SUMMARY_NUMBERS if key in numbers]
        assert "recall@1" in shared and [numbers[key] for key in shared] == [row[key] for key in shared], row


def test_the_matrices_have_no_near_ties_among_reranked_entries(case):
    """Each row's re-ranked scores are more than 2 x SCORE_TOLERANCE apart: both sides then rank them alike, so
    identical itm_eval results are implied by the scores, not a matter of how argsort breaks ties."""
    for key, matrix in case["arrays"].items():
        if key[-1].isdigit():
            for row in matrix:
                values = np.sort(row[row != FILL])
                assert np.diff(values).min() > 2 * SCORE_TOLERANCE, key


@pytest.fixture(scope="module")
def project_models(case, converted):
    return {"blip": load_model(f"blip:{case['checkpoint']}", device="cpu"),
            "hf": load_model(f"hf:{converted}", device="cpu")}


def test_image_preprocessing_is_the_official_transform(case, project_models):
    """The official evaluations' pixels (every test image, then every altered copy, as the text-to-image dataset
    yields them), against the project's preprocessing of the same files: one of them grayscale, four portrait."""
    source, pixels = case["source"], case["arrays"]["t2i_pixels"]
    np.testing.assert_array_equal(case["arrays"]["i2t_pixels"], pixels[:source.num_images])
    images = [source.original_image(index) for index in range(source.num_images)]
    images += [source.altered_image(index, IMAGE_ATTACK) for index in range(source.num_images)]
    assert images[GRAYSCALE].mode == "L" and pixels.shape == (len(images), 3, 384, 384)
    for model in project_models.values():
        mine = np.stack([model.preprocess_image(image) for image in images])
        assert mine.dtype == np.float32
        np.testing.assert_allclose(mine, pixels, rtol=0, atol=PIXEL_TOLERANCE)


def test_pre_caption_is_the_official_one_on_every_real_caption(case, annotations_dir):
    official = case["summary"]["pre_caption"]  # blip/data/utils.py pre_caption(caption, 30) of each caption
    assert len(official) > 120_000
    assert [caption for caption, cleaned in official.items() if pre_caption(caption, BLIP_MAX_WORDS) != cleaned] == []
    assert any(len(caption.split()) > BLIP_MAX_WORDS for caption in official)  # the truncation is exercised
    records = read_annotation_file(ATTACK, annotations_dir)
    texts = [official[caption] for index in IMAGE_INDICES for caption in records[index]["caption"]]
    assert case["summary"]["texts"]["i2t"] == texts


def test_token_ids_and_the_enc_token_are_the_official_ones(case, project_models):
    """The token ids of every caption, and the ITM passes' ids: the official code replaces the first token by
    ``[ENC]`` (BLIP's last token id) in every pair it scores."""
    summary, arrays = case["summary"], case["arrays"]
    captions = [caption for record in case["source"].benchmark.records(ATTACK) for caption in record["caption"]]
    ground_truth = case["source"].ground_truth_captions()
    assert summary["enc_token_id"] == summary["tokenizer_size"] - 1 == summary["bos_token_id"] + 1
    for model in project_models.values():
        assert model.enc_token_id == summary["enc_token_id"]
        ids = model.tokenize(captions)[:, 0]
        np.testing.assert_array_equal(ids, arrays["i2t_text_ids"])
        itm = ids.copy()
        itm[:, 0] = model.enc_token_id
        per_image = arrays["i2t_itm_ids"].reshape(case["source"].num_images, len(captions), -1)  # k = all texts
        for rows in per_image:
            np.testing.assert_array_equal(np.unique(rows, axis=0), np.unique(itm, axis=0))
        ground_truth_itm = model.tokenize(ground_truth)[:, 0]
        ground_truth_itm[:, 0] = model.enc_token_id
        per_caption = arrays["t2i_itm_ids"].reshape(len(ground_truth), 2 * case["source"].num_images, -1)
        np.testing.assert_array_equal(per_caption, np.repeat(ground_truth_itm[:, None], per_caption.shape[1], axis=1))


def test_the_converted_folder_holds_the_checkpoint(case, converted, project_models):
    import torch

    state = torch.load(case["checkpoint"], weights_only=True)["model"]
    model = project_models["hf"].model
    converted_state = model.state_dict()
    for key, value in state.items():
        name = blip_official.official_to_transformers_key(key)
        if name is not None:
            torch.testing.assert_close(converted_state[name], value, rtol=0, atol=0, msg=key)
    assert json.loads((converted / "config.json").read_text())["architectures"] == ["BlipForImageTextRetrieval"]
    assert project_models["hf"].fingerprint == project_models["blip"].fingerprint


@pytest.mark.parametrize("content", ["not a torch file", "no model key", "not BLIP"])
def test_a_file_that_is_no_blip_retrieval_checkpoint_is_refused(tmp_path, content):
    import torch

    path = tmp_path / "model.pth"
    if content == "not a torch file":
        path.write_bytes(b"GIF89a not a checkpoint")
    elif content == "no model key":
        torch.save({"state_dict": {"fc.weight": torch.zeros(2, 2)}}, path)
    else:
        torch.save({"model": {"fc.weight": torch.zeros(2, 2)}}, path)
    name = f"blip:{path}"
    with pytest.raises(ModelError, match=re.escape(f"`model` {name!r} is not a BLIP retrieval checkpoint")):
        load_model(name, device="cpu")


def test_the_command_names_the_bad_checkpoint(case, tmp_path, capsys):
    missing = tmp_path / "model_base_retrieval_coco.pth"
    status = main(["run", "--model", f"blip:{missing}", "--benchmark", str(case["benchmark"]), "--out",
                   str(tmp_path / "report"), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert status == 1
    assert f"rococo-eval: error: --model 'blip:{missing}': no such file" in capsys.readouterr().err


def test_settings_beside_the_checkpoint_are_checked(case, tmp_path):
    checkpoint = tmp_path / "model.pth"
    checkpoint.write_bytes(case["checkpoint"].read_bytes())
    (tmp_path / "model.json").write_text(json.dumps({"num_heads": 4}))
    with pytest.raises(ModelError, match="must be a JSON object with any of vision_num_attention_heads, "):
        load_model(f"blip:{checkpoint}", device="cpu")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    (tmp_path / "model.json").write_text(json.dumps({"tokenizer": "vocab.txt"}))  # relative to the JSON file
    with pytest.raises(ModelError, match=r"vocab.txt' with \[DEC\] and \[ENC\] has 7 tokens, the checkpoint's text "):
        load_model(f"blip:{checkpoint}", device="cpu")


@pytest.mark.parametrize("stack", ["visual_encoder.blocks", "text_encoder.encoder.layer"])
def test_a_state_dict_naming_layer_1_000_000_is_refused_before_a_layer_is_built(stack):
    """One extra key once made the configuration of 1,000,001 layers that the model was then built with."""
    import torch

    state = {"visual_encoder.cls_token": torch.zeros(1, 1, 64), "visual_encoder.pos_embed": torch.zeros(1, 577, 64),
             "visual_encoder.patch_embed.proj.weight": torch.zeros(64, 3, 16, 16),
             "visual_encoder.blocks.0.mlp.fc1.weight": torch.zeros(256, 64),
             "text_encoder.embeddings.word_embeddings.weight": torch.zeros(30524, 48),
             "text_encoder.embeddings.position_embeddings.weight": torch.zeros(64, 48),
             "text_encoder.encoder.layer.0.intermediate.dense.weight": torch.zeros(192, 48),
             "text_encoder.encoder.layer.0.crossattention.self.key.weight": torch.zeros(48, 64),
             "vision_proj.weight": torch.zeros(32, 64), f"{stack}.1000000.output.dense.bias": torch.zeros(1)}
    with pytest.raises(CheckpointError, match=re.escape(f"the checkpoint: its layers ({stack}.1000000.*) = 1000001 is "
                                                        "out of bounds: an int from 1 to 96")):
        blip_official.blip_config(state)


def small_blip_state(vision_width=64, text_width=64, positions=5, patch=16):
    """An official BLIP retrieval state dict with the keys its configuration is read from (module docstring), at
    these sizes: enough for the configuration, not for the model."""
    import torch

    return {"visual_encoder.cls_token": torch.zeros(1, 1, vision_width),
            "visual_encoder.pos_embed": torch.zeros(1, positions, vision_width),
            "visual_encoder.patch_embed.proj.weight": torch.zeros(vision_width, 3, patch, patch),
            "visual_encoder.blocks.0.mlp.fc1.weight": torch.zeros(4 * vision_width, vision_width),
            "text_encoder.embeddings.word_embeddings.weight": torch.zeros(9, text_width),
            "text_encoder.embeddings.position_embeddings.weight": torch.zeros(64, text_width),
            "text_encoder.encoder.layer.0.intermediate.dense.weight": torch.zeros(4 * text_width, text_width),
            "text_encoder.encoder.layer.0.crossattention.self.key.weight": torch.zeros(text_width, vision_width),
            "vision_proj.weight": torch.zeros(8, vision_width), "text_proj.weight": torch.zeros(8, text_width),
            "itm_head.weight": torch.zeros(2, text_width)}


def hostile_blip_sizes():
    """``(what is wrong, the state's sizes, the settings beside it, what the refusal says)``: sizes that transformers
    divides by, or checks only after the file's name is lost."""
    yield ("a ViT narrower than one head", {"vision_width": 32}, {},
           "its ViT's attention heads (vision_num_attention_heads) = 0 is out of bounds: an int from 1 to 32")
    yield ("a BERT narrower than one head", {"text_width": 48}, {},
           "its BERT's attention heads (text_num_attention_heads) = 0 is out of bounds: an int from 1 to 48")
    yield ("heads that do not split the width", {}, {"vision_num_attention_heads": 3},
           "its ViT's width 64 does not split into 3 attention heads (vision_num_attention_heads)")
    yield ("patches of 0 pixels", {"patch": 0}, {},
           "its ViT's patch size (visual_encoder.patch_embed.proj.weight) = 0 is out of bounds: an int from 1 to 2048")
    yield ("no patch position", {"positions": 1}, {}, "its ViT has 0 patch positions, not a square grid")


@pytest.mark.parametrize("sizes, settings, said", [case[1:] for case in hostile_blip_sizes()],
                         ids=[case[0] for case in hostile_blip_sizes()])
def test_sizes_transformers_cannot_build_are_refused_naming_the_checkpoint_and_the_field(tmp_path, sizes, settings,
                                                                                         said):
    """Once a ZeroDivisionError, or transformers' ValueError that named no file."""
    import torch

    path = tmp_path / "model.pth"
    torch.save({"model": small_blip_state(**sizes)}, path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\ndog\n")  # 9 tokens with [DEC], [ENC]
    (tmp_path / "model.json").write_text(json.dumps({"tokenizer": "vocab.txt", **settings}))
    with pytest.raises(ModelError) as refused:
        load_model(f"blip:{path}", device="cpu")
    assert str(refused.value) == f"`model` 'blip:{path}': {said}"
