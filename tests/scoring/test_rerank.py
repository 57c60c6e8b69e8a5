"""Two-stage scoring (ITC ranking, ITM re-ranking) of BLIP and BLIP-2 retrieval models.

The models are tiny real ``transformers`` architectures with random weights, built from configs in
``helpers/tiny_models.py`` and loaded through ``rococo_eval.models.adapters.load_model("hf:PATH")``. Most tests
score a small RoCOCO-shaped benchmark (``helpers/tiny_coco.py``: a few images with 5 or 6 captions each, 5
adversarial captions per image, the real gallery layouts) through ``score_model`` and compare every entry with a
direct computation; one test runs ``rococo-eval run`` on the real
annotation files and reads the saved matrices back with ``rococo-eval score``.
"""

import json

import numpy as np
import pytest

import rococo_recall
from rococo_eval.models import adapters as models
from rococo_eval.cli import main
from rococo_eval.models.cache import EmbeddingCache, ItemSet, LazyImages
from rococo_eval.scoring.galleries import RerankScorer, score_model
from rococo_eval.catalog import CLEAN, IMAGE_TO_TEXT, TEXT_TO_IMAGE
from rococo_eval.scoring.rerank import FILL, PairStore, Reranker, Side
from rococo_eval.models.blip import Blip2Reranker, pre_caption
from rococo_eval.io.savedscores import score_file_name
from helpers.metric_cases import assert_same_results, outputs
from helpers.reference_metric import official_itm_eval

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def load(name, precision="fp32"):
    return models.load_model(name, device="cpu", precision=precision)


def run_galleries(model, source, cache_dir, attacks=("rand_voca",), k=10, save_scores=None, batch_size=16,
                  compact_scores=False):
    """``score_model`` with a fresh scorer; returns the results and the scorer (its pair counts)."""
    cache = EmbeddingCache(cache_dir, batch_size=batch_size)
    scorer = Reranker(model, cache.root, k=k, batch_size=batch_size)
    return score_model(model, source, list(attacks), cache, scorer=RerankScorer(scorer), save_scores=save_scores,
                       compact_scores=compact_scores), scorer


def without_bounds(results):
    return {key: {name: value for name, value in outputs(output).items() if not name.endswith("_bounds")}
            for key, output in results.items()}


def is_blip2(model) -> bool:
    """Whether ``model`` is a BLIP-2 checkpoint: by its class, not its name (a path that may well hold "blip2":
    the third ``blip_name`` folder of a session is ``blip2``)."""
    return isinstance(model, Blip2Reranker)


def hf_inputs(model, images, texts):
    """The checkpoint's own inputs, made here as the official evaluations make them (not by the adapter)."""
    max_words = 50 if is_blip2(model) else 30
    tokens = model.tokenizer([pre_caption(text, max_words) for text in texts], padding="max_length", truncation=True,
                             max_length=35, return_tensors="pt")
    pixels = model.processor(images=images, return_tensors="pt")["pixel_values"]
    return tokens["input_ids"], tokens["attention_mask"], pixels


def brute_force_itc(model, images, texts) -> np.ndarray:
    """ITC scores of every image with every text from the checkpoint's own forward pass (images x texts)."""
    import torch

    ids, mask, pixels = hf_inputs(model, images, texts)
    with torch.no_grad():
        if is_blip2(model):
            return model.model(pixel_values=pixels, input_ids=ids, attention_mask=mask).logits_per_image.numpy()
        return model.model(input_ids=ids, attention_mask=mask, pixel_values=pixels, use_itm_head=False).itm_score.numpy()


def direct_itm(model, images, texts) -> np.ndarray:
    """ITM logit of class 1 of each (images[i], texts[i]) pair from the checkpoint's own forward pass; BLIP's
    first token replaced by [ENC] as the official evaluation does (here the id after [DEC])."""
    import torch

    ids, mask, pixels = hf_inputs(model, images, texts)
    with torch.no_grad():
        if is_blip2(model):
            return model.model(pixel_values=pixels, input_ids=ids, attention_mask=mask,
                               use_image_text_matching_head=True).logits_per_image[:, 1].numpy()
        ids[:, 0] = model.tokenizer.bos_token_id + 1
        return model.model(input_ids=ids, attention_mask=mask, pixel_values=pixels,
                           use_itm_head=True).itm_score[:, 1].numpy()


def gallery_items(source, attack, direction):
    """Queries and gallery items (official order) of one gallery of ``source``, as images and captions."""
    layout = source.gallery(attack, direction, "official")
    images = [source.original_image(index) for index in range(source.num_images)]
    captions = source.ground_truth_captions()
    if direction == IMAGE_TO_TEXT:
        pool = captions + (source.adversarial_captions(attack) if attack != CLEAN else [])
        return layout, images, [pool[row] for row in layout.gallery_rows]
    pool = images + ([source.altered_image(index) for index in range(source.num_images)] if attack != CLEAN else [])
    return layout, captions, [pool[row] for row in layout.gallery_rows]


@pytest.mark.parametrize("which", ["blip", "blip2"])
@pytest.mark.parametrize("attack, direction", [(CLEAN, TEXT_TO_IMAGE), ("rand_voca", IMAGE_TO_TEXT),
                                               ("mix_seed1", TEXT_TO_IMAGE)])
def test_two_stage_scores_equal_the_checkpoints_own_itc_and_itm(which, attack, direction, request, tiny_source,
                                                                tmp_path):
    """Every re-ranked entry is the direct ITM logit plus the brute-force ITC score of its pair; the re-ranked
    entries of a query are its k best by ITC; every other entry is -100."""
    model = load(request.getfixturevalue(f"{which}_name"))
    k = 7
    cache = EmbeddingCache(tmp_path / "cache", batch_size=16)
    results = score_model(model, tiny_source, ["rand_voca"], cache)  # embeds every item set once
    assert set(results) == {"clean/image_to_text", "clean/text_to_image", "rand_voca/image_to_text"}
    layout, queries, gallery = gallery_items(tiny_source, attack, direction)
    sides = sides_of(model, tiny_source, cache, attack, direction)
    scores = Reranker(model, tmp_path / "cache", k=k, batch_size=5).scores(layout, *sides)

    pool = np.concatenate([side.vectors for side in sides[1]])[layout.gallery_rows]
    if direction == IMAGE_TO_TEXT:
        first_stage, itc = model.itc_scores(sides[0].vectors, pool), brute_force_itc(model, queries, gallery)
    else:
        first_stage, itc = model.itc_scores(pool, sides[0].vectors).T, brute_force_itc(model, gallery, queries).T
    np.testing.assert_allclose(first_stage, itc, atol=1e-5)
    reranked = scores != FILL
    assert (reranked.sum(axis=1) == k).all() and (scores[~reranked] == FILL).all()
    for query, row in enumerate(itc):
        assert set(np.flatnonzero(reranked[query])) == set(np.argsort(-row)[:k])
    rows, columns = np.nonzero(reranked)
    pair_images = [queries[q] if direction == IMAGE_TO_TEXT else gallery[c] for q, c in zip(rows, columns)]
    pair_texts = [gallery[c] if direction == IMAGE_TO_TEXT else queries[q] for q, c in zip(rows, columns)]
    expected = direct_itm(model, pair_images, pair_texts) + itc[rows, columns]
    np.testing.assert_allclose(scores[rows, columns], expected, atol=1e-5)


def sides_of(model, source, cache, attack, direction):
    """The scorer's query side and pool sides of one gallery, from the cached embeddings."""
    from rococo_eval.scoring.galleries import adversarial_captions, ground_truth_captions, original_images

    def side(items):
        return Side(items.name, items.fingerprint, items.items, cache.embeddings(model, items))

    images, captions = side(original_images(source)), side(ground_truth_captions(source))
    if direction == IMAGE_TO_TEXT:
        pool = [captions] + ([side(adversarial_captions(source, attack))] if attack != CLEAN else [])
        return images, pool
    altered = LazyImages(source.altered_image, source.num_images)
    return captions, [images] + ([side(ItemSet(f"images/{attack}", "image", altered, "f" * 64))]
                                 if attack != CLEAN else [])


def count_pairs(model, fail_after=None):
    """Wrap ``model.match`` to count the ITM pairs it scores; with ``fail_after``, call number fail_after + 1
    raises KeyboardInterrupt (as Ctrl-C would, in the middle of the ITM passes)."""
    calls = {"calls": 0, "pairs": 0}
    match = model.match

    def counted(features, positions, tokens):
        if fail_after is not None and calls["calls"] >= fail_after:
            raise KeyboardInterrupt
        calls["calls"] += 1
        calls["pairs"] += len(tokens)
        return match(features, positions, tokens)

    model.match = counted
    return calls


def top_k_pairs(scores, layout, direction, attack):
    """The (image item, caption item) names of every re-ranked entry of a gallery's score matrix."""
    pairs = set()
    num_originals = len(layout.gallery_rows) - layout.num_adversarial
    for query, column in zip(*np.nonzero(scores != FILL)):
        row = int(layout.gallery_rows[column])
        item = ("original", row) if row < num_originals else (attack, row - num_originals)
        pairs.add(((("original", int(query)), item) if direction == IMAGE_TO_TEXT else (item, ("original", int(query)))))
    return pairs


def test_pair_cache_is_shared_by_the_galleries_and_runs(blip_name, tiny_source, tmp_path):
    """Each distinct (image, caption) pair of all galleries' top k is computed once; a second run computes none."""
    model = load(blip_name)
    calls = count_pairs(model)
    save = tmp_path / "scores"
    save.mkdir()
    attacks = ("rand_voca", "danger")
    first, scorer = run_galleries(model, tiny_source, tmp_path / "cache", attacks, k=10, save_scores=save)
    needed = set()
    for key in first:
        attack, direction = key.split("/")
        scores = np.load(save / score_file_name(attack, direction))
        needed |= top_k_pairs(scores, tiny_source.gallery(attack, direction), direction, attack)
    total = 10 * (tiny_source.num_images * (1 + len(attacks)) + len(tiny_source.captions))  # queries x k
    assert calls["pairs"] == scorer.computed == len(needed) < total
    assert scorer.computed + scorer.reused == total

    calls.update(calls=0, pairs=0)
    again, scorer = run_galleries(model, tiny_source, tmp_path / "cache", attacks, k=10)
    assert calls["pairs"] == scorer.computed == 0 and scorer.reused == total
    assert_same_results(again, first)


def test_interrupted_run_resumes(blip_name, tiny_source, tmp_path):
    """Ctrl-C in the middle of the ITM passes keeps the finished shards; the rerun computes only the rest."""
    reference, scorer = run_galleries(load(blip_name), tiny_source, tmp_path / "reference", k=10, batch_size=8)
    needed = scorer.computed
    model = load(blip_name)
    calls = count_pairs(model, fail_after=30)
    with pytest.raises(KeyboardInterrupt):
        run_galleries(model, tiny_source, tmp_path / "cache", k=10, batch_size=8)
    shards = list((tmp_path / "cache").glob("*/itm-*/pairs-*.npz"))
    stored = sum(len(np.load(path)["keys"]) for path in shards)
    assert shards and 0 < stored < calls["pairs"] <= needed  # the pairs of the group in flight are lost

    model = load(blip_name)
    calls = count_pairs(model)
    resumed, scorer = run_galleries(model, tiny_source, tmp_path / "cache", k=10, batch_size=8)
    assert calls["pairs"] == scorer.computed == needed - stored
    assert_same_results(resumed, reference)
    assert all(len(list(folder.glob("pairs-*.npz"))) == 1 for folder in (tmp_path / "cache").glob("*/itm-*"))


def test_bf16_agrees_with_fp32(blip_name, tiny_source, tmp_path):
    """bf16 keeps 8 bits of mantissa. On this tiny random model (large activations) the re-ranked scores moved by
    up to 0.07 (image-to-text) and 0.10 (text-to-image), 97.5-99.7% of the top-10 candidates stayed the same,
    and R@1/5/10 moved by at most one query; allowed here: 0.15, 90%, two queries."""
    results = {}
    matrices = {}
    for precision in ("fp32", "bf16"):
        save = tmp_path / precision
        save.mkdir()
        results[precision], _ = run_galleries(load(blip_name, precision), tiny_source, tmp_path / "cache", k=10,
                                              save_scores=save)
        matrices[precision] = {path.name: np.load(path) for path in save.iterdir()}
    for name, fp32 in matrices["fp32"].items():
        both = (fp32 != FILL) & (matrices["bf16"][name] != FILL)
        assert both.sum() >= 0.9 * (fp32 != FILL).sum(), name
        np.testing.assert_allclose(matrices["bf16"][name][both], fp32[both], atol=0.15, err_msg=name)
    for key, output in results["fp32"].items():
        for name in ("recall@1", "recall@5", "recall@10"):
            assert abs(results["bf16"][key].metrics[name] - output.metrics[name]) <= \
                2 * 100 / output.metrics["num_queries"], (key, name)


@pytest.fixture(scope="module")
def saved_scores(blip_name, tiny_source, tmp_path_factory):
    """The tiny galleries scored with k = 10 and with k = 3, each gallery's matrix saved whole and compact."""
    folder = tmp_path_factory.mktemp("saved")
    saved = {}
    for k in (10, 3):
        (folder / f"k{k}").mkdir()
        (folder / f"compact{k}").mkdir()
        results, _ = run_galleries(load(blip_name), tiny_source, folder / "cache", ("rand_voca",), k=k,
                                   save_scores=folder / f"k{k}")
        compact, _ = run_galleries(load(blip_name), tiny_source, folder / "cache", ("rand_voca",), k=k,
                                   save_scores=folder / f"compact{k}", compact_scores=True)
        assert_same_results(compact, results)
        saved[k] = results, {key: np.load(folder / f"k{k}" / score_file_name(*key.split("/"))) for key in results}
        saved[f"compact{k}"] = {key: folder / f"compact{k}" / score_file_name(*key.split("/"), k) for key in results}
    return saved


def test_saved_matrices_give_the_reported_numbers_and_the_official_ones(saved_scores, tiny_source):
    """Each saved matrix is the gallery the report was computed from; on it, with k >= 10, the metric gives the
    official ``itm_eval`` numbers (whose argsort orders the -100 block arbitrarily). A number the report bounds (a
    clean R@K where fewer than K clean candidates were re-ranked) is the pessimistic end of its bounds, and the
    official one lies within them."""
    results, matrices = saved_scores[10]
    bounded = 0
    for key, scores in matrices.items():
        layout = tiny_source.gallery(*key.split("/"))
        assert scores.dtype == np.float32 and scores.shape == (layout.num_queries, layout.num_gallery)
        assert_same_results({key: rococo_recall.rococo_recall(scores, **layout.metric_inputs(), per_query=True)},
                            without_bounds({key: results[key]}))
        official = official_itm_eval(scores, [list(r) for r in layout.references], layout.adversarial)
        metrics = results[key].metrics
        for name, value in official.items():
            assert metrics[name] == pytest.approx(value, abs=1e-9), (key, name)
        assert not any(name.startswith(("recall@", "r_mean", "false_rate")) and name.endswith("_bounds")
                       for name in metrics), key  # k >= 10: the whole gallery's numbers are decided
        optimistic = rococo_recall.rococo_recall(scores, **layout.metric_inputs(), ties="optimistic")
        for name in metrics:
            if name.endswith("_bounds") and "recall@" in name:
                bounded += 1
                base = name.removesuffix("_bounds")
                assert metrics[name] == (metrics[base], optimistic[base]), (key, name)
    assert bounded  # the tiny attacked galleries re-rank fewer than 10 clean candidates for some queries


@pytest.mark.parametrize("k", [10, 3])
def test_compact_files_are_scored_exactly_as_the_run_and_are_smaller(saved_scores, tiny_source, k):
    """``run --save-scores --compact-scores`` (issue 23, item 3): each gallery's compact file, planned and scored as
    ``rococo-eval score`` and the Space score it, gives the run's every number, per-query arrays and bounds
    included; it holds the full matrix's every entry, in 8 bytes per listed candidate."""
    from rococo_eval.io.scorefiles import read_header, read_top_k
    from rococo_eval.scoring.plan import GalleryFacts, ScoreRequest, plan_score_files, score_planned

    results, matrices = saved_scores[k]
    paths = saved_scores[f"compact{k}"]
    plans = plan_score_files([ScoreRequest(path) for path in paths.values()],
                             GalleryFacts(tiny_source.captions_per_image))
    assert {planned.key for planned in plans} == set(results)
    assert all(planned.info.is_compact and planned.info.candidates == k for planned in plans)
    notes = {planned.key: planned.choice.note for planned in plans}
    assert "order named in the file name); the scores do not decide" in notes["rand_voca/image_to_text"]  # read
    assert_same_results(score_planned(plans), results)
    for key, path in paths.items():
        compact = read_top_k(path)
        full = np.full(compact.shape, compact.fill, dtype=np.float32)
        np.put_along_axis(full, compact.top_columns.astype(np.int64), compact.top_scores, axis=1)
        np.testing.assert_array_equal(full, matrices[key])
        assert read_header(path).shape == matrices[key].shape
        # 8 bytes per listed candidate (int32 column, float32 score) against 4 per gallery item: RoCOCO's BLIP
        # galleries, 256 of 50,010 or 10,000 per query, shrink 98 and 20 times
        assert compact.top_columns.nbytes + compact.top_scores.nbytes == 8 * k * compact.shape[0], key


@pytest.mark.parametrize("k", [10, 3])
def test_tie_policy_cannot_change_recall_at_k_when_k_test_is_at_least_k(saved_scores, tiny_source, k):
    """With k_test >= 10 a correct item outside the re-ranked candidates ranks 10th or lower under any order of
    the -100 block, so R@1/5/10 do not depend on the tie policy. With k_test = 3 < K they do: pessimistic counts
    such a query as a miss at every K (R@5 = R@10 = R@3), optimistic puts the correct item right after the 3
    re-ranked wrong ones (R@5 = R@10 = 100)."""
    _, matrices = saved_scores[k]
    for key, scores in matrices.items():
        inputs = tiny_source.gallery(*key.split("/")).metric_inputs()
        pessimistic, optimistic = (rococo_recall.rococo_recall(scores, **inputs, k=(1, 3, 5, 10), ties=ties)
                                   for ties in ("pessimistic", "optimistic"))
        if k == 10:
            assert all(pessimistic[f"recall@{n}"] == optimistic[f"recall@{n}"] for n in (1, 5, 10)), key
        else:
            assert pessimistic["recall@5"] == pessimistic["recall@10"] == pessimistic["recall@3"] < 100, key
            assert optimistic["recall@5"] == optimistic["recall@10"] == 100, key
            assert pessimistic["recall@1"] == optimistic["recall@1"], key


@pytest.mark.slow
def test_run_then_score_reads_the_saved_matrices_back(blip_name, source, coco_root, tmp_path, capsys):
    """``rococo-eval run`` on the real annotation files (a tiny BLIP, k = 2) saves every gallery's matrix under a
    name that ``rococo-eval score DIR/*.npy`` reads with no order to guess, and gives the same report."""
    saved = tmp_path / "scores"
    assert main(["run", "--model", blip_name, "--attacks", "rand_voca", "--images-dir", str(coco_root),
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "--device", "cpu",
                 "--workers", "2", "--batch-size", "512", "--rerank-k", "2", "--save-scores", str(saved)]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    names = sorted(path.name for path in saved.iterdir())
    assert names == ["clean_image_to_text_official_order.npy", "clean_text_to_image_official_order.npy",
                     "rand_voca_image_to_text_official_order.npy"]
    rerank_meta = report["meta"]["rerank"]
    queries = 2 * source.num_images + len(source.ground_truth_captions())
    assert rerank_meta["k"] == 2 and report["meta"]["scores_dir"] == str(saved)
    assert rerank_meta["itm_pairs_computed"] + rerank_meta["itm_pairs_reused"] == 2 * queries
    assert rerank_meta["itm_pairs_reused"] > 0  # the ground-truth captions of rand_voca's gallery

    scores = np.load(saved / "rand_voca_image_to_text_official_order.npy", mmap_mode="r")
    assert ((np.asarray(scores[:100]) != FILL).sum(axis=1) == 2).all()
    capsys.readouterr()
    assert main(["score", *map(str, sorted(saved.iterdir())), "--out", str(tmp_path / "score")]) == 0
    rescored = json.loads((tmp_path / "score" / "report.json").read_text())
    for key, output in report["results"].items():
        for name in ("recall@1", "recall@5", "recall@10", "r_mean", "false_rate", "clean_recall@1"):
            assert rescored["results"][key][name] == output[name], (key, name)
    note = rescored["meta"]["files"]["rand_voca/image_to_text"]["note"]
    assert "in the official order (shape (5000, 50010); attack, direction and order named in the file name)" in note


def test_pair_store_drops_a_torn_shard_and_refuses_another_models_folder(tmp_path):
    manifest = {"model": "a", "images": "i", "captions": "c"}
    store = PairStore(tmp_path / "pairs", manifest, num_captions=100)
    store.add(np.array([1, 2]), np.array([3, 4]), np.array([0.5, 0.25], dtype=np.float32))
    store.add(np.array([5]), np.array([6]), np.array([2.0], dtype=np.float32))
    torn = next((tmp_path / "pairs").glob("pairs-000001.*.npz"))
    torn.write_bytes(b"torn")  # a damaged file
    reopened = PairStore(tmp_path / "pairs", manifest, num_captions=100)
    found, values = reopened.lookup(np.array([1, 2, 5]), np.array([3, 4, 6]))
    assert found.tolist() == [True, True, False] and values[:2].tolist() == [0.5, 0.25]
    assert not torn.exists()
    with pytest.raises(ValueError, match="holds other ITM scores"):
        PairStore(tmp_path / "pairs", dict(manifest, model="b"), num_captions=100)
