"""The Space through its API: gradio_client against the app served on a free loopback port."""

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

import app
from helpers import REPO_ROOT
from helpers.space_app import (
    CAPTIONS,
    DECIDING_CAPTIONS,
    TinySource,
    clear_scores,
    disk_use,
    example_upload,
    free_port,
    serve,
    wait_until_served,
)
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.space import logic
from rococo_eval.space.handlers import Evaluated, Handlers, Shown, ShownAt
from rococo_eval.space.outputs import BUDGET_ENV
from rococo_eval.catalog import IMAGE_ATTACKS
from rococo_eval.layout import gallery_layout
from rococo_eval.io.atomic import write_json
from rococo_eval.reporting.report import REFERENCE_RESULTS
from rococo_recall import rococo_recall

SHAPES = {"clean/image_to_text": (30, 152), "attacked/image_to_text": (30, 302),
          "clean/text_to_image": (152, 30), "attacked/text_to_image": (152, 60)}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path_factory.mktemp("outputs"))
    yield serve(demo)
    demo.close()


@pytest.fixture
def client(url):
    return Client(url, verbose=False)


def planted(shape, references, adversarial=None, seed=0, dtype=np.float32):
    """Random scores where each query's first correct item gets a boost and adversarial items a smaller one."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal(shape)
    scores[np.arange(shape[0]), [r[0] if isinstance(r, (list, tuple)) else r for r in references]] += 1.5
    if adversarial is not None:
        scores[:, adversarial] += 0.8
    return scores.astype(dtype)


def layout_scores(attack, direction, seed, order="official", dtype=np.float32, captions=CAPTIONS):
    layout = gallery_layout(attack, direction, captions, order)
    return layout, planted((layout.num_queries, layout.num_gallery), layout.references, layout.adversarial, seed, dtype)


def rows(*cells):
    """A layout table for /evaluate: one row ``[file, attack, direction, order]`` per argument."""
    return {"headers": app.LAYOUT_HEADERS, "data": [list(row) + [""] for row in cells]}


def as_saved(result, folder, name="expected"):
    """The metric's output as it reads back from JSON (tuples -> lists, NaN -> None)."""
    return json.loads(write_json(result, Path(folder) / f"{name}.json").read_text())


def saved_results(answer):
    return json.loads(Path(answer[3]).read_text())


def test_every_action_has_an_endpoint(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/detect", "/evaluate", "/example", "/upload_precision", "/flipped", "/explore", "/explore_random",
            "/compare", "/submit", "/leaderboard"} <= set(endpoints)



def test_each_handler_fills_the_components_its_result_names(client):
    """Issue 42: the handlers returned 7- and 8-tuples matched by position to lists in app.py. Now each result is a
    named tuple whose fields name the components it fills, app.py lists a handler's outputs from those names (a name
    that finds no component, or two, is refused), and the API still returns the values in the order of the fields;
    the order lists, one per text attack, come as a dict by attack, given to Gradio keyed by component."""
    from types import SimpleNamespace

    tab = SimpleNamespace(index="the index", captions="the captions", images="the images", note="the note")
    assert app._outputs(Shown, tab) == ["the captions", "the images", "the note"]
    assert app._outputs(ShownAt, tab) == ["the index", "the captions", "the images", "the note"]
    with pytest.raises(ValueError, match="^Shown.note names 2 components of the page, not one$"):
        app._outputs(Shown, tab, SimpleNamespace(note="another note"))
    with pytest.raises(ValueError, match="^Evaluated.message names 0 components of the page, not one$"):
        app._outputs(Evaluated, tab)
    orders = {"rand_voca": "the list of rand_voca", "danger": "the list of danger"}  # a handler's dict by name
    assert app._by_component(orders, lambda word: {"danger": word, "rand_voca": word.upper()}, "shown") == {
        "the list of danger": "shown", "the list of rand_voca": "SHOWN"}
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    labels = {name: [value["label"] for value in endpoints[name]["returns"]]
              for name in ("/evaluate", "/example", "/explore_random", "/submit")}
    assert labels == {"/evaluate": ["message", "results", "chart", "json"],  # the session's states are not returned
                      "/example": ["message", "results", "chart", "json"],
                      "/explore_random": ["image index", "captions", "images", "note"],
                      "/submit": ["submission", "leaderboard"]}

def test_detect(client, tmp_path):
    files = {"m_rand_voca.npy": SHAPES["attacked/image_to_text"], "clean.npy": SHAPES["clean/image_to_text"],
             "images.npy": SHAPES["attacked/text_to_image"], "broken.npy": (30, 7)}
    for name, shape in files.items():
        np.save(tmp_path / name, np.zeros(shape, dtype=np.float16))
    np.savez(tmp_path / "mine.npz", scores=np.zeros((4, 9)), references=np.arange(4))
    answer = client.predict([handle_file(tmp_path / name) for name in [*files, "mine.npz"]], api_name="/detect")
    assert answer["headers"] == app.LAYOUT_HEADERS
    rows = {row[0]: row for row in answer["data"]}
    assert rows["m_rand_voca.npy"][1:4] == ["rand_voca", "image_to_text", ""]  # zeros cannot tell the order
    assert "the scores do not decide the order" in rows["m_rand_voca.npy"][4]
    assert "choose the order, official (each image's captions, then its 5 altered ones)" in rows["m_rand_voca.npy"][4]
    assert rows["clean.npy"][1:4] == ["clean", "image_to_text", "official"]
    assert rows["images.npy"][1] == "" and "mix_seed1, mix_seed10, mix_seed100" in rows["images.npy"][4]
    assert rows["broken.npy"][1] == "" and "fits no RoCOCO layout" in rows["broken.npy"][4]
    assert rows["mine.npz"][1:4] == ["custom", "custom", "custom"]


def test_detect_says_what_an_embeddings_file_is(client, tmp_path):
    """Issue 31: an embeddings file was described as a file that "holds several arrays ... name the scores array";
    /detect now says what it is and that it needs the images, before Evaluate."""
    from safetensors.numpy import save_file

    from rococo_eval.scoring.embeddingsfile import FORMAT

    path = tmp_path / "clip.safetensors"
    vectors = {"images/original": np.zeros((30, 4), np.float32), "captions/ground_truth": np.zeros((152, 4), "f4")}
    save_file(vectors, str(path), metadata={"format": FORMAT, "version": "1"})
    [row] = client.predict([handle_file(path)], api_name="/detect")["data"]
    assert row[:4] == ["clip.safetensors", "", "", ""]
    assert row[4].startswith("clip.safetensors: an embeddings file (a model's vectors of the images and captions")
    assert "not a score matrix" in row[4] and "scores array" not in row[4]
    assert "this Space has no images" not in row[4]  # the tiny source has its images
    [without_images] = logic.detect_layouts([str(path)], GalleryFacts.of(TinySource(CAPTIONS, images=False)))
    assert without_images[4].endswith("so it cannot score it: score it with `rococo-eval score FILE` where the images "
                                      "are")


def test_evaluate_standard_galleries(client, tmp_path):
    galleries = [("clean", "image_to_text", "official", "clean_i2t.npy"),
                 ("rand_voca", "image_to_text", "official", "clip_rand_voca.npy"),
                 ("danger", "image_to_text", "dataset", "clip_danger.npz"),
                 ("clean", "text_to_image", "official", "clean_t2i.safetensors"),
                 *[(attack, "text_to_image", "official", f"clip_{attack}.npy") for attack in IMAGE_ATTACKS[:3]]]
    expected, paths = {}, []
    for seed, (attack, direction, order, name) in enumerate(galleries):
        layout, scores = layout_scores(attack, direction, seed, order, np.float16 if attack == "danger" else np.float32)
        path = tmp_path / name
        if name.endswith(".npy"):
            np.save(path, scores)
        elif name.endswith(".npz"):
            np.savez_compressed(path, scores=scores)
        else:
            from safetensors.numpy import save_file
            save_file({"scores": scores}, str(path))
        expected[f"{attack}/{direction}"] = rococo_recall(scores, **layout.metric_inputs(), k=(1, 5, 10))
        paths.append(path)
    layouts = rows(["clip_danger.npz", "danger", "", "dataset"], ["clip_rand_voca.npy", "", "", "official"])
    answer = client.predict([handle_file(p) for p in paths], layouts, api_name="/evaluate")
    message, table, chart, download = answer
    saved = saved_results(answer)
    assert set(saved["results"]) == set(expected)
    for key, result in expected.items():
        assert saved["results"][key] == as_saved(result, tmp_path), key
    assert saved["meta"]["files"]["danger/image_to_text"]["order"] == "dataset"
    assert saved["meta"]["files"]["rand_voca/image_to_text"]["path"] == "clip_rand_voca.npy"
    assert "clip_rand_voca.npy` (30 x 302, float32): rand_voca image-to-text gallery in the official order (shape " \
           "(30, 302); attack named in the file name, direction read from the shape, order given)" in message
    attacks = [row[table["headers"].index("attack")] for row in table["data"]]
    assert attacks == ["clean", "rand_voca", "danger", "clean", "mix_seed1", "mix_seed10", "mix_seed100",
                       "mix (mean of seeds 1, 10, 100)"]
    mix_mean = np.mean([expected[f"{a}/text_to_image"]["recall@1"] for a in IMAGE_ATTACKS[:3]])
    assert table["data"][-1][table["headers"].index("R@1")].startswith(f"{mix_mean:.2f} (")
    with Image.open(chart) as image:
        assert image.size[0] > 500


def test_evaluate_options(client, tmp_path):
    layout, scores = layout_scores("same_concept", "image_to_text", 3)
    scores = np.round(scores, 1)  # ties
    np.save(tmp_path / "same_concept.npy", scores)
    answer = client.predict([handle_file(tmp_path / "same_concept.npy")],
                            rows(["same_concept.npy", "", "", "official"]), ties="optimistic", bootstrap=25,
                            api_name="/evaluate")
    expected = rococo_recall(scores, **layout.metric_inputs(), ties="optimistic", bootstrap=25)
    assert expected != rococo_recall(scores, **layout.metric_inputs(), bootstrap=25)
    assert saved_results(answer)["results"]["same_concept/image_to_text"] == as_saved(expected, tmp_path)
    assert saved_results(answer)["meta"]["settings"] == {"ties": "optimistic", "bootstrap": 25}
    assert "[" in answer[1]["data"][0][answer[1]["headers"].index("R@1")]  # the CI is shown


def test_evaluate_custom_layouts(client, tmp_path):
    rng = np.random.default_rng(5)
    references = [[int(i), int(i) + 40] for i in range(25)]
    adversarial = np.zeros(90, dtype=bool)
    adversarial[70:] = True
    scores = planted((25, 90), references, np.flatnonzero(adversarial), seed=9)
    np.savez(tmp_path / "inside.npz", scores=scores, references=np.array(references), adversarial=adversarial)
    other = rng.standard_normal((25, 90)).astype(np.float32)
    np.save(tmp_path / "outside.npy", other)
    (tmp_path / "references.json").write_text(json.dumps(references))
    np.save(tmp_path / "adversarial.npy", np.flatnonzero(adversarial))
    layouts = {"headers": app.LAYOUT_HEADERS, "data": [["outside.npy", "custom", "", "", ""]]}
    answer = client.predict([handle_file(tmp_path / "inside.npz"), handle_file(tmp_path / "outside.npy")], layouts,
                            handle_file(tmp_path / "references.json"), handle_file(tmp_path / "adversarial.npy"),
                            api_name="/evaluate")
    saved = saved_results(answer)["results"]
    assert saved["inside/custom"] == as_saved(rococo_recall(scores, references, adversarial), tmp_path)
    assert saved["outside/custom"] == as_saved(rococo_recall(other, references, adversarial), tmp_path)


def _save(tmp_path, name, values, **arrays):
    path = tmp_path / name
    if arrays:
        np.savez(path, scores=values, **arrays)
    else:
        np.save(path, values, allow_pickle=values.dtype == object)
    return path


def _nan_scores():
    scores = np.zeros(SHAPES["clean/image_to_text"], dtype=np.float32)
    scores[3, 5] = np.nan
    return scores


ERRORS = [
    ("fits_nothing.npy", np.zeros((30, 301), np.float32), None,
     r"fits_nothing.npy: shape \(30, 301\) fits no RoCOCO layout \(expected \(30, 152\) for image_to_text clean"),
    ("scores.npy", np.zeros(SHAPES["attacked/image_to_text"], np.float32), None,
     "scores.npy: shape .* fits an attacked image_to_text gallery of same_concept, .*: choose the attack"),
    ("nan.npy", _nan_scores(), None, r"nan.npy: `predictions` must be finite: predictions\[3\]\[5\] is nan"),
    ("ints.npy", np.zeros((30, 152), np.int32), None, r"ints.npy: scores must be floats .* got int32"),
    ("vector.npy", np.zeros(152, np.float32), None, r"vector.npy: scores must be a non-empty 2-D matrix"),
    ("objects.npy", np.full((30, 152), None, dtype=object), None, "objects.npy: scores must be floats .* got object"),
    ("clip_mix_seed1.npy", np.zeros(SHAPES["clean/text_to_image"], np.float32), None,
     r"clip_mix_seed1.npy: the file name names the attack mix_seed1, but shape \(152, 30\) is that of the clean "
     r"text_to_image gallery \(a mix_seed1 gallery is \(152, 60\)\): check the file, or choose the attack clean"),
    ("clean_rand_voca.npy", np.zeros(SHAPES["attacked/image_to_text"], np.float32), None,
     "clean_rand_voca.npy: the file name 'clean_rand_voca.npy' names clean and rand_voca"),
    ("m_rand_voca.npy", np.zeros(SHAPES["attacked/image_to_text"], np.float32), None,
     r"m_rand_voca.npy: rand_voca image-to-text gallery \(shape \(30, 302\); attack named in the file name, direction "
     r"read from the shape\); the "
     r"scores do not decide the order .*: choose the order, official .* or dataset .*; choose it from its order list"),
    ("danger.npy", np.zeros(SHAPES["attacked/image_to_text"], np.float32), ["danger.npy", "danger", "", ""],
     r"danger.npy: danger image-to-text gallery \(shape \(30, 302\); attack named in the file name, direction read "
     r"from the shape\); the scores do not decide the order"),
    ("wrong.npy", np.zeros((30, 302), np.float32), ["wrong.npy", "mix_seed1", "", ""],
     r"wrong.npy: mix_seed1/text_to_image expects a \(152, 60\) matrix, got \(30, 302\)"),
    ("typo.npy", np.zeros((30, 302), np.float32), ["typo.npy", "rand-voca", "", ""],
     "typo.npy: `attack` must be one of clean, same_concept"),
    ("clean.npy", np.zeros((30, 152), np.float32), ["other.npy", "clean", "", ""],
     "the layout table names 'other.npy', which is not among the uploads"),
    ("custom.npy", np.zeros((30, 152), np.float32), ["custom.npy", "custom", "", ""],
     "custom.npy: a custom layout needs references: upload a references file"),
]


@pytest.mark.parametrize("name, values, layout, problem", ERRORS, ids=[e[0] for e in ERRORS])
def test_evaluate_errors(client, tmp_path, name, values, layout, problem):
    path = _save(tmp_path, name, values)
    layouts = {"layouts": {"headers": app.LAYOUT_HEADERS, "data": [layout + [""]]}} if layout else {}
    with pytest.raises(AppError, match=problem):
        client.predict([handle_file(path)], **layouts, api_name="/evaluate")


@pytest.mark.parametrize("arrays, problem", [
    ({"references": np.array([[0, 200]] * 25)},
     r"bad.npz: `references\[0\]` holds 200, out of range for a gallery of 90"),
    ({"references": np.arange(25), "adversarial": np.ones(89, bool)},
     r"bad.npz: `adversarial` mask must have one entry per gallery item \(90\), got 89"),
    ({"references": np.arange(24)}, r"bad.npz: `references` must have one entry per query \(25\), got 24"),
    ({"references": np.arange(25), "adversarial": np.array([3])},
     "points at gallery item 3, which `adversarial` marks"),
])
def test_evaluate_custom_errors(client, tmp_path, arrays, problem):
    path = _save(tmp_path, "bad.npz", np.zeros((25, 90), np.float32), **arrays)
    with pytest.raises(AppError, match=problem):
        client.predict([handle_file(path)], api_name="/evaluate")


def test_every_problem_is_reported_at_once_beside_what_was_scored(client, tmp_path):
    first = _save(tmp_path, "a_rand_voca.npy", np.zeros((30, 302), np.float32))
    second = _save(tmp_path, "b_rand_voca.npy", np.zeros((30, 302), np.float32))
    third = _save(tmp_path, "c.npy", np.zeros((3, 3), np.float32))
    layouts = rows(["a_rand_voca.npy", "", "", "official"], ["b_rand_voca.npy", "", "", "dataset"])
    message, _, _, download = client.predict([handle_file(p) for p in (first, second, third)], layouts,
                                             api_name="/evaluate")
    assert list(json.loads(Path(download).read_text())["results"]) == ["rand_voca/image_to_text"]
    assert "Not scored (2):" in message and "- c.npy: shape (3, 3) fits no RoCOCO layout" in message
    assert "- b_rand_voca.npy: gallery rand_voca/image_to_text was already given by a_rand_voca.npy" in message
    with pytest.raises(AppError) as raised:  # nothing to score: every problem in the error
        client.predict([handle_file(p) for p in (second, third)], rows(["b_rand_voca.npy", "", "", "sideways"]),
                       api_name="/evaluate")
    assert "c.npy: shape (3, 3) fits no RoCOCO layout" in str(raised.value)
    assert "b_rand_voca.npy: `order` must be one of" in str(raised.value)


def test_evaluate_waits_for_the_order_of_an_unclear_text_attack(client, tmp_path):
    """30 images are too few for the scores to show the order: it stays blank until chosen, then it is used."""
    layout, scores = layout_scores("rand_voca", "image_to_text", 4, order="dataset")
    path = tmp_path / "m_rand_voca.npy"
    np.save(path, scores)
    detected = client.predict([handle_file(path)], api_name="/detect")["data"][0]
    assert detected[:4] == ["m_rand_voca.npy", "rand_voca", "image_to_text", ""]
    unclear = r"m_rand_voca.npy: .*: choose the order, .*; choose it from its order list under the layout table"
    with pytest.raises(AppError, match=unclear):
        client.predict([handle_file(path)], api_name="/evaluate")
    with pytest.raises(AppError, match=unclear):
        client.predict([handle_file(path)], {"headers": app.LAYOUT_HEADERS, "data": [detected]}, api_name="/evaluate")
    detected[3] = "dataset"
    answer = client.predict([handle_file(path)], {"headers": app.LAYOUT_HEADERS, "data": [detected]},
                            api_name="/evaluate")
    saved = saved_results(answer)
    assert saved["results"]["rand_voca/image_to_text"] == as_saved(
        rococo_recall(scores, **layout.metric_inputs(), k=(1, 5, 10)), tmp_path)
    assert saved["meta"]["files"]["rand_voca/image_to_text"]["order"] == "dataset"


def test_clear_scores_show_their_order(tmp_path):
    """With 80 images and a model with signal, the order is read from the scores: by the functions and the API."""
    demo = app.build_app(source=TinySource(DECIDING_CAPTIONS), output_dir=tmp_path / "outputs")
    client = Client(serve(demo), verbose=False)
    try:
        for order, other in (("dataset", "official"), ("official", "dataset")):
            layout, scores = clear_scores("danger", order)
            path = tmp_path / order / "vit_danger.npy"
            path.parent.mkdir()
            np.save(path, scores)
            expected = as_saved(rococo_recall(scores, **layout.metric_inputs(), k=(1, 5, 10)), tmp_path)
            misread = rococo_recall(scores, **gallery_layout("danger", "image_to_text", DECIDING_CAPTIONS,
                                                             other).metric_inputs())
            assert misread["recall@1"] < 5 < expected["recall@1"] - 50
            decided = f"the scores decide the {order} order (of 80 sampled queries"

            [row] = logic.detect_layouts([str(path)], GalleryFacts(DECIDING_CAPTIONS))
            assert row[1:4] == ["danger", "image_to_text", order] and decided in row[4]
            evaluation = logic.evaluate_files([str(path)], facts=GalleryFacts(DECIDING_CAPTIONS))
            assert as_saved({key: result.metrics for key, result in evaluation.results.items()}, tmp_path,
                            "functions") == {"danger/image_to_text": expected}
            assert decided in evaluation.message

            [row] = client.predict([handle_file(path)], api_name="/detect")["data"]
            assert row[1:4] == ["danger", "image_to_text", order] and decided in row[4]
            answer = client.predict([handle_file(path)], api_name="/evaluate")
            assert saved_results(answer)["results"] == {"danger/image_to_text": expected}
            saved_file = saved_results(answer)["meta"]["files"]["danger/image_to_text"]
            assert saved_file["order"] == order and decided in saved_file["note"]
            assert decided in answer[0]

            # issue 31: the other order stated in the layout table is refused, with the evidence
            evidence = (f"the {other} order is given, but the scores decide the {order} order: 79 of 80 sampled "
                        f"queries score their {order}-order ground truth higher, 0 their {other}-order one")
            with pytest.raises(AppError) as raised:
                client.predict([handle_file(path)], rows(["vit_danger.npy", "", "", other]), api_name="/evaluate")
            assert evidence in str(raised.value)
            assert (f"choose {order} from its order list under the layout table, or tick "
                    f"“{logic.TRUST_ORDER_LABEL}” to score it in the {other} order all the same") in str(raised.value)
            trusted = client.predict([handle_file(path)], rows(["vit_danger.npy", "", "", other]), None, None,
                                     "pessimistic", 0, True, api_name="/evaluate")  # the page's override ticked
            assert saved_results(trusted)["results"]["danger/image_to_text"]["recall@1"] == misread["recall@1"]
            assert f"but the scores decide the {order} order (of 80 sampled queries" in trusted[0]
            assert f"scored in the {other} order all the same, as asked" in trusted[0]
    finally:
        demo.close()


def test_evaluate_refuses_bad_requests(client, tmp_path, monkeypatch):
    path = _save(tmp_path, "clean.npy", np.zeros((30, 152), np.float32))
    with pytest.raises(AppError, match="upload at least one score file"):
        client.predict([], api_name="/evaluate")
    with pytest.raises(AppError, match="greater than maximum value 1000"):
        client.predict([handle_file(path)], bootstrap=5000, api_name="/evaluate")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "clean.npy").write_bytes(path.read_bytes())
    with pytest.raises(AppError, match="several uploads are named clean.npy"):
        client.predict([handle_file(path), handle_file(copy / "clean.npy")], api_name="/evaluate")
    monkeypatch.setenv("ROCOCO_MAX_UPLOAD_MB", "0.01")
    with pytest.raises(AppError, match=r"clean.npy: the file is 18368 bytes \(17.9 KB\), over the limit of 10485"):
        client.predict([handle_file(path)], api_name="/evaluate")
    monkeypatch.delenv("ROCOCO_MAX_UPLOAD_MB")
    answer = client.predict([handle_file(path)], api_name="/evaluate")  # the app still serves
    assert "clean/image_to_text" in saved_results(answer)["results"]


def test_explore(client):
    captions, images, note = client.predict(13, api_name="/explore")
    assert captions.count("<tr>") == 1 + 6  # image 13 has 6 captions
    assert "<mark>weapon</mark> number 13 in scene 0<br><small>dog → weapon</small>" in captions
    assert captions.endswith("<td>—</td><td>—</td><td>—</td><td>—</td></tr></tbody></table>")
    assert [item["caption"] for item in images] == ["original", *IMAGE_ATTACKS]
    with Image.open(images[0]["image"]) as original:
        assert original.size == (48, 32)
    assert "val2014/COCO_val2014_000000000013.jpg" in note
    with pytest.raises(AppError, match=r"`index` must be an image index from 0 to 29, got 30"):
        client.predict(30, api_name="/explore")
    index, captions, images, note = client.predict(api_name="/explore_random")
    assert 0 <= index < 30 and f"number {index} in scene 4" in captions and len(images) == 7


def test_compare_shows_references_and_only_this_sessions_results(url, tmp_path):
    mine, theirs = Client(url, verbose=False), Client(url, verbose=False)
    references = mine.predict(api_name="/compare")
    assert len(references["data"]) == len(REFERENCE_RESULTS)
    assert references["headers"][:3] == ["model", "attack", "direction"] and references["headers"][-1] == "source"
    layout, scores = layout_scores("diff_concept", "image_to_text", 11)
    np.save(tmp_path / "diff_concept.npy", scores)
    mine.predict([handle_file(tmp_path / "diff_concept.npy")], rows(["diff_concept.npy", "", "", "official"]),
                 api_name="/evaluate")
    compared = mine.predict(api_name="/compare")
    assert len(compared["data"]) == len(REFERENCE_RESULTS) + 1
    assert compared["data"][-1][:3] == ["your upload", "diff_concept", "image-to-text"]
    recall = rococo_recall(scores, **layout.metric_inputs())["recall@1"]
    assert compared["data"][-1][compared["headers"].index("R@1")] == f"{recall:.2f}"
    assert len(theirs.predict(api_name="/compare")["data"]) == len(REFERENCE_RESULTS)


def test_flipped_queries_after_an_evaluation(url, tmp_path):
    """/flipped lists what the metric's per-query output says the attacks flipped, pages it, filters it by
    gallery, and serves every flipped query of the filter as CSV, with the by-word and by-method tables."""
    client = Client(url, verbose=False)
    note, html, csv_path, words, chart, methods, words_note = client.predict("all", 1, 1, api_name="/flipped")
    assert "Evaluate score files of attacked galleries first" in note and html == "" and chart is None
    assert words_note == "Evaluate score files of text attacks first: the words they replaced show here."
    text_layout, text_scores = layout_scores("rand_voca", "image_to_text", 21)
    image_layout, image_scores = layout_scores("mix_seed10", "text_to_image", 22)
    np.save(tmp_path / "m_rand_voca.npy", text_scores)
    np.save(tmp_path / "m_mix_seed10.npy", image_scores)
    client.predict([handle_file(tmp_path / "m_rand_voca.npy"), handle_file(tmp_path / "m_mix_seed10.npy")],
                   rows(["m_rand_voca.npy", "", "", "official"]), api_name="/evaluate")
    text = rococo_recall(text_scores, **text_layout.metric_inputs(), per_query=True)
    image = rococo_recall(image_scores, **image_layout.metric_inputs(), per_query=True)
    text_flips = np.flatnonzero((text["clean_rank"] == 0) & (text["rank"] > 0))
    image_flips = np.flatnonzero((image["clean_rank"] == 0) & (image["rank"] > 0))
    assert len(text_flips) >= 3 and len(image_flips) > 10

    note, html, csv_path, words, chart, methods, words_note = client.predict("all", 1, 1, api_name="/flipped")
    total = len(text_flips) + len(image_flips)
    assert note.startswith(f"{total} flipped queries (rand_voca/image_to_text: "
                                                f"{len(text_flips)}, mix_seed10/text_to_image: {len(image_flips)})")
    assert f"page 1 of {-(-total // logic.FLIPPED_PAGE_SIZE)}, rows 1–10" in note
    lines = Path(csv_path).read_text().splitlines()
    assert len(lines) == 1 + total
    shown = [line.split(",") for line in lines[1:]]
    margins = [text["top_score"][q] - text["best_correct_score"][q] for q in text_flips]
    assert [int(cells[2]) for cells in shown[:len(text_flips)]] == \
        [int(q) for _, q in sorted(zip(np.negative(margins), text_flips))]
    assert {int(cells[2]) for cells in shown[len(text_flips):]} == set(image_flips.tolist())
    assert html.count("<tr>") == 10 and "<mark>war</mark>" in html and "dog → war" in html
    assert html.count('src="data:image/jpeg;base64,') >= 10  # the tiny source has images
    assert words["headers"] == logic.WORD_HEADERS
    clean_correct = int((text["clean_rank"] == 0).sum())
    replaced = [row for row in words["data"] if row[1] == "replaced"]
    assert replaced[0][:4] == ["rand_voca", "replaced", "dog", clean_correct]
    assert Image.open(chart).format == "PNG"
    assert methods["data"][0][:4] == ["mix", "mix_seed10", int((image["clean_rank"] == 0).sum()), len(image_flips)]
    assert words_note.startswith("Words replaced in at least 1 clean-correct images, highest success rate first")
    words_note = client.predict("all", 1, 1000, api_name="/flipped")[6]  # the by-word table's empty state, explained
    assert words_note.startswith(f"No word has 1000 clean-correct images yet: the most is {clean_correct} (dog). "
                                 "Lower the fewest images a word needs")

    note, html, csv_path, words, chart, methods, words_note = client.predict(
        "mix_seed10/text_to_image", 2, 20, api_name="/flipped")
    assert note.startswith(f"{len(image_flips)} flipped queries (mix_seed10/text_to_image: {len(image_flips)}); "
                           "page 2 of")
    assert "altered image" in html and "its partner, image" in html and "<mark>" not in html
    shown = min(20, len(image_flips) - 20)
    assert html.count("<tr>") == shown and html.count('src="data:image/jpeg;base64,') == 3 * shown
    assert len(Path(csv_path).read_text().splitlines()) == 1 + len(image_flips)
    assert words["data"] == [] and chart is None and "no text attack (image-to-text)" in words_note  # none here
    with pytest.raises(AppError, match=r"`page` must be a whole number from 1 to \d+, got 99"):
        client.predict("all", 99, 20, api_name="/flipped")
    with pytest.raises(AppError, match="`gallery` must be one of all, rand_voca/image_to_text, "
                                       "mix_seed10/text_to_image, got 'danger/image_to_text'"):
        client.predict("danger/image_to_text", 1, 20, api_name="/flipped")


def test_explore_without_images(tmp_path):
    demo = app.build_app(source=TinySource(CAPTIONS, images=False), output_dir=tmp_path)
    try:
        captions, images, note = Client(serve(demo), verbose=False).predict(2, api_name="/explore")
    finally:
        demo.close()
    assert images == [] and "ROCOCO_IMAGES_DIR" in note and "number 2 in scene 4" in captions


def test_without_annotations_the_page_says_how_and_custom_layouts_work(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_DIR", str(tmp_path / "nowhere"))
    demo = app.build_app(output_dir=tmp_path)
    try:
        url = serve(demo)
        page = httpx.get(f"{url}config", timeout=30).text
        assert "The RoCOCO annotation files are not available here" in page and "ROCOCO_ANNOTATIONS_DIR" in page
        client = Client(url, verbose=False)
        scores = planted((6, 12), list(range(6)))
        np.savez(tmp_path / "mine.npz", scores=scores, references=np.arange(6))
        answer = client.predict([handle_file(tmp_path / "mine.npz")], api_name="/evaluate")
        assert saved_results(answer)["results"]["mine/custom"] == as_saved(rococo_recall(scores, list(range(6))),
                                                                           tmp_path)
        np.save(tmp_path / "clean.npy", np.zeros((5000, 2), np.float32))
        with pytest.raises(AppError, match=r"clean.npy: standard layouts need the RoCOCO caption counts.*"
                                           r"\$ROCOCO_ANNOTATIONS_DIR"):
            client.predict([handle_file(tmp_path / "clean.npy")], api_name="/evaluate")
        with pytest.raises(AppError, match="annotation files are not available"):
            client.predict(0, api_name="/explore")
    finally:
        demo.close()


# The real app, as `make run` starts it: `python app.py` with the real annotations, in its own process
# (marked slow: starting it takes 15-30 s).

LOAD_THREADS, LOAD_REQUESTS, LOAD_SHAPE = 4, 3, (200, 10_000)
RSS_GROWTH_BOUND, RSS_PEAK_BOUND = 64 << 20, 160 << 20


@pytest.fixture(scope="module")
def real_app(annotations_dir, tmp_path_factory):
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "ROCOCO_ANNOTATIONS_DIR": str(annotations_dir), "GRADIO_ANALYTICS_ENABLED": "False",
           "GRADIO_TEMP_DIR": str(tmp_path_factory.mktemp("gradio")), "ROCOCO_MAX_UPLOAD_MB": "16",
           "TMPDIR": str(tmp_path_factory.mktemp("tmp"))}  # its own output folder, which a terminated app leaves
    log = open(tmp_path_factory.mktemp("log") / "app.log", "w+")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_until_served(process, url, log, "app.py")
    yield url, process
    process.terminate()
    process.wait(timeout=30)
    log.close()


@pytest.mark.slow
def test_real_app_explores_the_real_captions(real_app):
    captions, images, note = Client(real_app[0], verbose=False).predict(83, api_name="/explore")
    assert captions.count("<tr>") == 1 + 6  # image 83 has a sixth caption, without altered ones
    assert "<mark>viewers</mark> and other pastries on display ground and purchase" in captions
    assert "val2014/COCO_val2014_000000415746.jpg" in note and images == []


@pytest.mark.slow
def test_real_app_detects_real_layouts(real_app, tmp_path):
    np.save(tmp_path / "small.npy", np.zeros((5000, 3), np.float16))
    with pytest.raises(AppError, match=r"small.npy: shape \(5000, 3\) fits no RoCOCO layout \(expected \(5000, 25010\) "
                                       r"for image_to_text clean, \(5000, 50010\) for image_to_text attacked"):
        Client(real_app[0], verbose=False).predict([handle_file(tmp_path / "small.npy")], api_name="/evaluate")


@pytest.mark.slow
def test_real_app_refuses_oversized_uploads(real_app, tmp_path):
    """`python app.py` passes the limit ($ROCOCO_MAX_UPLOAD_MB, 16 here) to gradio: the upload is refused."""
    url = real_app[0]
    path = tmp_path / "huge.npy"
    with open(path, "wb") as handle:
        handle.truncate(17 << 20)
    with pytest.raises(ValueError, match="huge.npy exceeds the maximum file size of 16777216 bytes"):
        Client(url, verbose=False).predict([handle_file(path)], api_name="/evaluate")
    with open(path, "rb") as handle:
        response = httpx.post(f"{url}gradio_api/upload", files={"files": ("huge.npy", handle)}, timeout=60)
    assert response.status_code == 413, response.text


def _load_request(tmp_path, thread, request):
    """One mid-size custom gallery: an .npz with its layout inside, or an .npy with side files."""
    seed = 100 * thread + request
    rng = np.random.default_rng(seed)
    adversarial = rng.random(LOAD_SHAPE[1]) < 0.2
    clean_items = np.flatnonzero(~adversarial)
    references = rng.choice(clean_items, size=(LOAD_SHAPE[0], 3))
    scores = planted(LOAD_SHAPE, references.tolist(), np.flatnonzero(adversarial), seed=seed)
    scores[:, references[:, 0]] += 0.1 * request  # every request has its own answer
    name = f"load_{thread}_{request}"
    if request % 2:
        np.save(tmp_path / f"{name}.npy", scores)
        (tmp_path / f"{name}_refs.json").write_text(json.dumps(references.tolist()))
        np.save(tmp_path / f"{name}_adv.npy", adversarial)
        args = [[handle_file(tmp_path / f"{name}.npy")], {"headers": app.LAYOUT_HEADERS,
                                                          "data": [[f"{name}.npy", "custom", "", "", ""]]},
                handle_file(tmp_path / f"{name}_refs.json"), handle_file(tmp_path / f"{name}_adv.npy")]
    else:
        np.savez(tmp_path / f"{name}.npz", scores=scores, references=references, adversarial=adversarial)
        args = [[handle_file(tmp_path / f"{name}.npz")]]
    return name, args, as_saved(rococo_recall(scores, references, adversarial), tmp_path, f"{name}_expected")


def _run_clients(url, jobs, server):
    """Each of LOAD_THREADS clients sends its share of ``jobs`` in turn; returns answers, errors and peak RSS."""
    answers, errors, peak = {}, [], [server.memory_info().rss]
    share = -(-len(jobs) // LOAD_THREADS)

    def work(thread):
        client = Client(url, verbose=False)
        for name, args, _ in jobs[thread * share:(thread + 1) * share]:
            try:
                answers[name] = saved_results(client.predict(*args, api_name="/evaluate"))["results"]
            except Exception as error:  # noqa: BLE001 - reported with the request's name
                errors.append(f"{name}: {error!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(LOAD_THREADS)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak.append(server.memory_info().rss)
        time.sleep(0.05)
    return answers, errors, max(peak)


@pytest.mark.slow
def test_refused_evaluations_release_their_memory_maps(real_app, tmp_path):
    """Score files the metric refuses (a NaN) were memory-mapped to be read: once each request is refused, the server
    maps none of them (the error's context held the frames that held the maps)."""
    from safetensors.numpy import save_file

    url, process = real_app
    client = Client(url, verbose=False)
    for attempt in range(3):
        _, args, _ = _load_request(tmp_path, 50 + attempt, 0)
        with np.load(args[0][0]["path"]) as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays["scores"][7, 11] = np.nan
        path = tmp_path / f"refused_{attempt}.safetensors"
        save_file({"scores": arrays["scores"], "references": arrays["references"],
                   "adversarial": arrays["adversarial"]}, str(path))
        with pytest.raises(AppError, match=r"is nan"):
            client.predict([handle_file(path)], api_name="/evaluate")
    with open(f"/proc/{process.pid}/maps") as maps:
        mapped = [line.split()[-1] for line in maps if "refused_" in line]
    assert mapped == []


@pytest.mark.slow
def test_concurrent_evaluations_are_isolated_and_memory_stays_bounded(real_app, tmp_path):
    """4 clients x 3 requests of 200 x 10,000 custom galleries at once; each answer is the metric's own.

    The server evaluates 2 requests at a time (``concurrency``), each holding one 7.6 MB matrix and a few
    MB of blocks. After a warm-up round (imports, allocator arenas of the worker threads), the 12 requests
    upload 92 MB of scores. Bounds: a server that kept each request's matrix would grow by at least 92 MB,
    so the growth after the round must stay under 64 MB; the peak under load must stay under 160 MB above
    the warm level. Measured here: 10-30 MB for both, none of it per-request Python objects (tracemalloc
    finds under 1 MB over 36 requests, gradio's per-session state, capped by gradio at 10,000 sessions);
    the rest is matplotlib's bounded text caches (new tick labels per file) and allocator arenas.
    """
    url, process = real_app
    server = psutil.Process(process.pid)
    jobs = [_load_request(tmp_path, t, r) for t in range(LOAD_THREADS) for r in range(LOAD_REQUESTS)]
    warm_up = [_load_request(tmp_path, LOAD_THREADS + t, 0) for t in range(LOAD_THREADS)]
    assert not _run_clients(url, warm_up, server)[1]
    baseline = server.memory_info().rss
    started = time.monotonic()
    answers, errors, peak = _run_clients(url, jobs, server)
    elapsed = time.monotonic() - started
    assert not errors, errors
    for name, _, expected in jobs:
        assert answers[name] == {f"{name}/custom": expected}, name
    growth = server.memory_info().rss - baseline
    print(f"\n{len(jobs)} requests in {elapsed:.1f} s; server RSS {baseline / 2**20:.0f} MB warm, peak "
          f"+{(peak - baseline) / 2**20:.0f} MB, after +{growth / 2**20:.1f} MB")
    assert growth < RSS_GROWTH_BOUND
    assert peak - baseline < RSS_PEAK_BOUND


def test_the_space_scores_image_attacks_of_other_seeds(benchmark, tmp_path):
    """A generated benchmark's mix_seed7 (not a RoCOCO seed): the page's handlers detect it from the file name and
    score it, as `rococo-eval score --benchmark` does."""
    from app import _layout_help
    from rococo_eval.space.logic import facts_and_problem

    facts, _ = facts_and_problem(benchmark=benchmark)
    layout = facts.source.gallery("mix_seed7")
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] = 1.0
    path = tmp_path / "mix_seed7_text_to_image.npy"
    np.save(path, scores)
    handlers = Handlers(facts, tmp_path / "out")
    [row] = handlers.detect([str(path)])
    assert row[:3] == [path.name, "mix_seed7", "text_to_image"], row
    evaluated = handlers.evaluate([str(path)])
    assert "mix_seed7" in evaluated.message
    evaluation_rows = evaluated.user_rows
    assert [(row["attack"], row["recall@1"]) for row in evaluation_rows] == [("mix_seed7", 100.0)]
    help_text = _layout_help(facts)
    assert "mix_seed1/7, patch_seed1/7, or custom" in help_text  # the page's help says so


def test_an_evaluation_is_submitted_and_the_board_survives_a_restart(tmp_path):
    """Through gradio_client: evaluate, submit (twice: one row), a bad link refused; a new app on the same database
    shows the row."""
    database = tmp_path / "board.sqlite3"
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs", leaderboard_db=database)
    try:
        client = Client(serve(demo), verbose=False)
        layout, scores = layout_scores("clean", "image_to_text", seed=3)
        np.save(tmp_path / "clean.npy", scores)
        client.predict([handle_file(tmp_path / "clean.npy")], rows(["clean.npy", "", "", ""]), api_name="/evaluate")
        message, board = client.predict("client model", "https://example.org/m", "fp16", "", "", "all",
                                        api_name="/submit")
        assert message == ("added client model to the board; on the board it fills clean i2t; "  # issue 41: a partial
                           "mean text is blank: a mean is over all four text attacks and this evaluation has none of "
                           "them; mean image is blank: a mean is over all six image attacks and this evaluation has "
                           "none of them")
        assert "client model" in [row[0] for row in board["data"]]
        assert client.predict("client model", "", "fp32", "", "", "all", api_name="/submit")[0].endswith("already")
        with pytest.raises(AppError, match="`link` must start with http"):
            client.predict("other", "ftp://x", "fp32", "", "", "all", api_name="/submit")
    finally:
        demo.close()
    expected = rococo_recall(scores, **layout.metric_inputs())["recall@1"]
    restarted = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs2", leaderboard_db=database)
    try:
        board = Client(serve(restarted), verbose=False).predict("client", "submitted", api_name="/leaderboard")
    finally:
        restarted.close()
    assert [row[0] for row in board["data"]] == ["client model"]
    assert board["data"][0][board["headers"].index("clean i2t")] == round(expected, 4)  # a number: it sorts as one


def test_malformed_files_are_named_one_by_one_and_do_not_hide_the_others(client, tmp_path):
    """Issue 29: each malformed file (forged safetensors headers, a corrupt deflate stream, a 100 MB header) gets its
    own one-line note in /detect, and /evaluate scores the good file beside them and names every bad one."""
    from helpers.malformed import huge_header, malformed_files

    bad = {**malformed_files(tmp_path / "bad"), "huge header": huge_header(tmp_path / "huge.safetensors")}
    layout, scores = layout_scores("clean", "image_to_text", 3)
    good = tmp_path / "clean_i2t.npy"
    np.save(good, scores)
    uploads = [handle_file(good)] + [handle_file(path) for path in bad.values()]
    detected = {row[0]: row for row in client.predict(uploads, api_name="/detect")["data"]}
    assert detected["clean_i2t.npy"][1:4] == ["clean", "image_to_text", "official"]
    for kind, path in bad.items():
        note = detected[path.name][4]
        assert detected[path.name][1] == "" and note.startswith(f"{path.name}: ") and "\n" not in note, kind
    message, _, _, download = client.predict(uploads, rows(), api_name="/evaluate")
    saved = json.loads(Path(download).read_text())
    assert saved["results"]["clean/image_to_text"]["recall@1"] == rococo_recall(scores, **layout.metric_inputs())[
        "recall@1"]
    assert f"Not scored ({len(bad)}):" in message
    for path in bad.values():
        assert f"- {path.name}: " in message


def test_a_custom_layout_with_a_deep_references_file_is_refused_in_one_line(client, tmp_path):
    from helpers.malformed import deep_references

    np.save(tmp_path / "mine.npy", np.eye(3, 6, dtype=np.float32))
    with pytest.raises(AppError, match="references.json: the references JSON nests 200000 deep, deeper than its 2"):
        client.predict([handle_file(tmp_path / "mine.npy")], rows(["mine.npy", "custom", "image_to_text", ""]),
                       handle_file(deep_references(tmp_path / "references.json")), api_name="/evaluate")


@pytest.fixture
def board_app(tmp_path):
    """An app on its own leaderboard database; yields its URL and the database's path."""
    database = tmp_path / "board.sqlite3"
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs", leaderboard_db=database)
    yield serve(demo), database
    demo.close()


def test_a_custom_layout_never_becomes_a_leaderboard_row(board_app, tmp_path):
    """Issue 29's fake 100% row: a 3 x 6 identity named rand_voca.npz, marked custom, is scored and refused by
    /submit; evaluated beside a RoCOCO gallery, only that gallery becomes the row."""
    url, _ = board_app
    client = Client(url, verbose=False)
    fake = tmp_path / "rand_voca.npz"
    np.savez(fake, scores=np.eye(3, 6, dtype="f4"), references=np.arange(3),
             adversarial=np.array([0, 0, 0, 1, 1, 1], dtype=bool))  # the issue's 0/1 ints are refused as ambiguous
    message, *_ = client.predict([handle_file(fake)], rows(["rand_voca.npz", "custom", "image_to_text", ""]),
                                 api_name="/evaluate")
    assert "Scored 1 file(s)" in message
    with pytest.raises(AppError, match="the last evaluation scored no RoCOCO gallery: the board takes the standard"):
        client.predict("fake model", "", "fp32", "", "", "all", api_name="/submit")
    layout, scores = layout_scores("clean", "image_to_text", seed=5)
    np.save(tmp_path / "clean.npy", scores)
    client.predict([handle_file(fake), handle_file(tmp_path / "clean.npy")],
                   rows(["rand_voca.npz", "custom", "image_to_text", ""], ["clean.npy", "", "", ""]),
                   api_name="/evaluate")
    message, board = client.predict("honest model", "", "fp32", "", "", "submitted", "all", api_name="/submit")
    assert message.startswith("added honest model to the board; on the board it fills clean i2t; mean text is blank")
    assert message.endswith("; not on the board, as custom layouts have no column there: "
                            "rand_voca.npz (rand_voca/image_to_text) (their numbers are in the json download)")  # named
    [row] = board["data"]
    shown = dict(zip(board["headers"], row))
    assert shown["clean i2t"] == round(rococo_recall(scores, **layout.metric_inputs())["recall@1"], 4)
    assert shown["rand voca"] is None and shown["mean text"] is None  # no number, not a zero


def test_the_synthetic_example_fills_every_output_and_is_never_submitted(board_app):
    """Issue 31: /example scores a synthetic model, labelled so, on the Space's galleries: results, chart, report,
    flipped queries, by-word and by-method tables, Compare; /submit refuses it."""
    from rococo_eval.space.example import SYNTHETIC_MODEL

    url, _ = board_app
    client = Client(url, verbose=False)
    message, results, chart, download = client.predict(api_name="/example")
    assert message.startswith(f"**The synthetic example: a {SYNTHETIC_MODEL}.**") and "Scored 6 file(s)" in message
    assert [row[results["headers"].index("attack")] for row in results["data"]] == [
        "clean", "same_concept", "diff_concept", "clean", "mix_seed1", "patch_seed1"]
    shown = [dict(zip(results["headers"], row)) for row in results["data"]]
    assert [row["attack success"] for row in shown if row["attack"] == "clean"] == ["n/a", "n/a"]  # no attack
    assert all(float(row["R@1"]) < float(row["clean R@1"]) for row in shown if row["attack"] != "clean")
    assert Image.open(chart).format == "PNG" and len(saved_results((None, None, None, download))["results"]) == 6
    note, html, _, words, _, methods, _ = client.predict("all", 1, 1, api_name="/flipped")
    assert "flipped queries (same_concept/image_to_text: " in note and html.count("<tr>") == 10
    assert {row[0] for row in words["data"]} == {"same_concept", "diff_concept"}
    assert [row[0] for row in methods["data"]][:2] == ["mix", "patch"]
    compared = client.predict(api_name="/compare")
    assert [row[0] for row in compared["data"]][-6:] == [SYNTHETIC_MODEL] * 6
    with pytest.raises(AppError, match=f"the last evaluation is the synthetic example \\({SYNTHETIC_MODEL}\\): the "
                                       "board takes evaluations of real models"):
        client.predict("synthetic", "", "fp32", "", "", "all", api_name="/submit")


def test_the_example_without_annotations_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCOCO_ANNOTATIONS_DIR", str(tmp_path / "nowhere"))
    demo = app.build_app(output_dir=tmp_path)
    try:
        with pytest.raises(AppError, match="the synthetic example scores this Space's galleries, whose layouts come "
                                           "from the RoCOCO annotation files, and they are not available here"):
            Client(serve(demo), verbose=False).predict(api_name="/example")
    finally:
        demo.close()


def test_example_clicks_add_nothing_to_the_output_folder(tmp_path):
    """Issue 40: each click on the example left its score files and outputs for an hour (22 MB at RoCOCO's size: two
    scripted clients held 32 GB); now the clicks after the first, each with its flipped queries, add no byte."""
    root = tmp_path / "outputs"
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=root, leaderboard_db=tmp_path / "board.sqlite3")
    try:
        client = Client(serve(demo), verbose=False)
        used = []
        for _ in range(3):
            client.predict(api_name="/example")
            client.predict("all", 1, 1, api_name="/flipped")
            used.append(disk_use(root))
    finally:
        demo.close()
    assert used == [used[0]] * 3
    example_files, _ = example_upload(TinySource(CAPTIONS), tmp_path / "example", 0)
    assert sorted(path.name for path in root.rglob("*.npz")) == sorted(Path(path).name for path in example_files)


def test_the_output_folder_stays_within_its_budget(tmp_path, monkeypatch):
    """Issue 40: the output folder grew without bound for an hour. Over `$ROCOCO_SPACE_OUTPUT_MB`, an evaluation whose
    files do not fit is refused while the folders kept are in use (the last minute), and once they are not, the one
    used longest ago is removed to make room."""
    source = TinySource(CAPTIONS)
    uploads = [example_upload(source, tmp_path / f"seed{seed}", seed) for seed in (1, 2, 3)]
    probe = Handlers(GalleryFacts.of(source), tmp_path / "probe")
    budget = int(2.5 * disk_use(Path(probe.evaluate(*uploads[0])[3]).parent))  # two evaluations fit, not three
    monkeypatch.setenv(BUDGET_ENV, str(budget / 2**20))
    root = tmp_path / "outputs"
    demo = app.build_app(source=source, output_dir=root, leaderboard_db=tmp_path / "board.sqlite3")
    try:
        client = Client(serve(demo), verbose=False)

        def evaluate(files, layouts):
            client.predict([handle_file(path) for path in files], {"headers": app.LAYOUT_HEADERS, "data": layouts},
                           api_name="/evaluate")

        kept = []
        for upload in uploads[:2]:
            before = set(root.glob("*/*"))
            evaluate(*upload)
            kept += set(root.glob("*/*")) - before
        with pytest.raises(AppError, match=r"the Space's output folder is full: this request's files \(.*\) would "
                                           rf"exceed its budget of .* \(\${BUDGET_ENV}\)"):
            evaluate(*uploads[2])
        assert len(kept) == 2 and all(folder.is_dir() for folder in kept) and disk_use(root) <= budget
        now = time.time()
        for folder, age in zip(kept, (300, 200)):
            os.utime(folder, (now - age, now - age))
        evaluate(*uploads[2])
    finally:
        demo.close()
    assert not kept[0].exists() and kept[1].is_dir() and disk_use(root) <= budget


def test_the_submit_form_takes_the_precision_of_the_upload(board_app, tmp_path):
    """Issue 31: after a float16 upload the form's precision is fp16 (it stayed fp32), after bfloat16 bf16 (a
    safetensors file written by hand: NumPy has no bfloat16)."""
    client = Client(board_app[0], verbose=False)
    assert client.predict(api_name="/upload_precision") == "fp32"  # nothing evaluated: as it was
    _, scores = layout_scores("clean", "image_to_text", seed=8, dtype=np.float16)
    np.save(tmp_path / "clean.npy", scores)
    client.predict([handle_file(tmp_path / "clean.npy")], rows(["clean.npy", "", "", ""]), api_name="/evaluate")
    assert client.predict(api_name="/upload_precision") == "fp16"
    bfloat16 = (scores.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # its upper half
    header = {"scores": {"dtype": "BF16", "shape": list(scores.shape), "data_offsets": [0, bfloat16.nbytes]}}
    encoded = json.dumps(header).encode()
    (tmp_path / "clean_bf16.safetensors").write_bytes(len(encoded).to_bytes(8, "little") + encoded
                                                      + bfloat16.tobytes())
    client.predict([handle_file(tmp_path / "clean_bf16.safetensors")], rows(), api_name="/evaluate")
    assert client.predict(api_name="/upload_precision") == "bf16"


def test_a_generated_benchmarks_result_never_lands_on_rococos_board(benchmark, tmp_path):
    """Issue 31: a Space serving a generated benchmark (12 images, seeds 1 and 7) scores its files; /submit refuses
    them, naming the benchmark and every gallery (mix_seed7 among them), and the board keeps RoCOCO's rows only."""
    from rococo_eval.data.source import open_source

    source = open_source(benchmark=benchmark)
    database = tmp_path / "board.sqlite3"
    demo = app.build_app(source=source, output_dir=tmp_path / "outputs", leaderboard_db=database)
    paths = []
    for attack, direction in (("clean", "image_to_text"), ("mix_seed7", "text_to_image")):
        layout = source.gallery(attack, direction)
        scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
        for query, correct in enumerate(layout.references):
            scores[query, list(correct)] = 1.0
        paths.append(tmp_path / f"{attack}_{direction}.npy")
        np.save(paths[-1], scores)
    try:
        client = Client(serve(demo), verbose=False)
        message, *_ = client.predict([handle_file(path) for path in paths], rows(), api_name="/evaluate")
        assert "Scored 2 file(s)" in message
        with pytest.raises(AppError) as refused:
            client.predict("benchmark model", "", "fp32", "", "", "all", api_name="/submit")
        assert (f"this Space serves a generated benchmark ({source.card_dataset[1]}), not RoCOCO: its results are not "
                "RoCOCO's, so the board takes none of them (this evaluation: clean/image_to_text, "
                "mix_seed7/text_to_image)") in str(refused.value)
        board = client.predict("", "all", "all", api_name="/leaderboard")
        assert {row[1] for row in board["data"]} == {"published"}
        config = httpx.get(f"{client.src}config", timeout=30).text
        assert "not RoCOCO: its results are not RoCOCO's and do not go on this board" in config
        # issue 39: the title and the intro name the benchmark served, not RoCOCO
        name = source.card_dataset[1]
        assert f'"title": "{name} — robustness evaluation"' in config.replace('":"', '": "')
        assert f"# {name} — how robust is an image-text matching model?" in config and "# RoCOCO —" not in config
    finally:
        demo.close()


def test_sessions_share_an_hourly_limit(tmp_path, monkeypatch):
    """Fresh sessions do not get fresh submissions: with a limit of 2 an hour, the third session is refused."""
    monkeypatch.setenv("ROCOCO_LEADERBOARD_HOURLY_LIMIT", "2")
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs",
                         leaderboard_db=tmp_path / "board.sqlite3")
    _, scores = layout_scores("clean", "image_to_text", seed=6)
    np.save(tmp_path / "clean.npy", scores)
    answers = []
    try:
        url = serve(demo)
        for number in range(4):
            client = Client(url, verbose=False)  # a new session each time
            client.predict([handle_file(tmp_path / "clean.npy")], rows(["clean.npy", "", "", ""]),
                           api_name="/evaluate")
            try:
                answers.append(client.predict(f"model {number}", "", "fp32", "", "", "all", api_name="/submit")[0])
            except AppError as error:
                answers.append(str(error))
    finally:
        demo.close()
    assert [answer.partition(";")[0] for answer in answers[:2]] == ["added model 0 to the board",
                                                                    "added model 1 to the board"]
    assert all("its limit for everyone together (2)" in answer for answer in answers[2:]), answers
    monkeypatch.setenv("ROCOCO_LEADERBOARD_HOURLY_LIMIT", "lots")
    with pytest.raises(ValueError, match=r"\$ROCOCO_LEADERBOARD_HOURLY_LIMIT must be a whole number >= 0, got 'lots'"):
        app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs")


def test_the_board_sends_one_page_of_rows_at_20000_rows(board_app):
    """Issue 41: at 20,000 rows a page load sent every row (24 MB); /leaderboard sends one page of PAGE_ROWS rows
    (page 2 the next ones, a page past the last the last one), a payload that does not grow with the board."""
    from rococo_eval.board.leaderboard import PAGE_ROWS

    url, database = board_app
    with sqlite3.connect(database) as connection:  # 20,000 submitted rows, numbered in the order they came
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "INSERT INTO submissions (digest, kind, model, link, precision, note, source, submitted_at, results) "
            "SELECT printf('%064d', i), 'submitted', printf('model %05d', i), '', 'fp32', 'a note of some length', "
            "'submitted in the Space', '2026-01-01T00:00:00+00:00', '{\"clean/image_to_text\": 50.0}' FROM n")
    client = Client(url, verbose=False)
    first = client.predict("", "submitted", "all", api_name="/leaderboard")
    assert [row[0] for row in first["data"]] == [f"model {number:05d}" for number in range(1, PAGE_ROWS + 1)]
    assert len(json.dumps(first)) < 100_000
    second = client.predict("", "submitted", "all", 2, api_name="/leaderboard")
    assert second["data"][0][0] == f"model {PAGE_ROWS + 1:05d}"
    last = client.predict("", "submitted", "all", 10_000, api_name="/leaderboard")
    assert last["data"][-1][0] == "model 20000" and len(last["data"]) == PAGE_ROWS
    with pytest.raises(AppError, match="Value 0 is less than minimum value 1"):
        client.predict("", "submitted", "all", 0, api_name="/leaderboard")


def test_a_database_that_cannot_be_read_leaves_scoring_working(tmp_path, monkeypatch):
    """A damaged leaderboard file: the Space starts, scores, says the board is unavailable, and leaves the file; once
    the file is moved away, the board comes back without a restart."""
    monkeypatch.setattr("rococo_eval.space.handlers.BOARD_RETRY_S", 0)
    database = tmp_path / "board.sqlite3"
    database.write_bytes(b"SQLite format 2\x00" + bytes(range(256)) * 16)
    before = database.read_bytes()
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=tmp_path / "outputs", leaderboard_db=database)
    try:
        client = Client(serve(demo), verbose=False)
        layout, scores = layout_scores("clean", "image_to_text", seed=7)
        np.save(tmp_path / "clean.npy", scores)
        answer = client.predict([handle_file(tmp_path / "clean.npy")], rows(["clean.npy", "", "", ""]),
                                api_name="/evaluate")
        assert saved_results(answer)["results"]["clean/image_to_text"]["recall@1"] == rococo_recall(
            scores, **layout.metric_inputs())["recall@1"]
        for api_name, arguments in (("/submit", ("m", "", "fp32", "", "", "all")), ("/leaderboard", ("", "all"))):
            with pytest.raises(AppError, match="board.sqlite3 cannot be read: file is not a database"):
                client.predict(*arguments, api_name=api_name)
        page = httpx.get(client.src, timeout=30).text
        assert "The leaderboard is unavailable" in page and str(tmp_path) not in page
        assert database.read_bytes() == before
        database.rename(tmp_path / "damaged.sqlite3")  # the operator moves it away
        board = client.predict("", "published", api_name="/leaderboard")
        assert "BLIP (paper v5)" in [row[0] for row in board["data"]]
    finally:
        demo.close()


def test_the_page_gives_the_shapes_and_orders_of_the_benchmark_it_serves(tmp_path):
    """Issue 31: a generated benchmark with 4 altered captions per image, not RoCOCO's 5: the page's standard shapes
    and its help on the orders count 4."""
    import gradio as gr

    class FourAltered(TinySource):
        adversarial_per_image = 4

    demo = app.build_app(source=FourAltered(CAPTIONS), output_dir=tmp_path / "outputs")
    texts = " ".join(block.value for block in demo.blocks.values()
                     if isinstance(block, gr.Markdown) and isinstance(block.value, str))
    assert "text attack (30, 272)" in texts and "then its 4 altered ones" in texts  # 152 + 4 x 30 captions
    assert "(30, 302)" not in texts and "5 altered" not in texts


def one_model_files(folder, galleries, seeds=None, dtypes=None, close=False):
    """Score files of one model (:func:`helpers.one_model.one_model_scores`; ``seeds[attack]``: another model's) for
    ``galleries``, ``(attack, direction)`` pairs, named for them; ``close``: close together, as cosine similarities,
    before they are saved as ``dtypes[attack]``."""
    from helpers.one_model import one_model_scores

    folder.mkdir(exist_ok=True)
    paths = []
    for attack, direction in galleries:
        layout = gallery_layout(attack, direction, CAPTIONS, "official" if direction == "image_to_text" else None)
        scores = one_model_scores(layout, CAPTIONS, attack, (seeds or {}).get(attack, 0))
        scores = (0.2 + 0.0002 * scores if close else scores).astype((dtypes or {}).get(attack, np.float32))
        paths.append(folder / f"{attack}_{direction}.npy")
        np.save(paths[-1], scores)
    return paths


IMAGE_GALLERIES = [("clean", "text_to_image"), ("mix_seed1", "text_to_image"), ("patch_seed10", "text_to_image")]


def test_files_that_disagree_are_named_in_the_message_and_the_report(client, tmp_path):
    """Issue 31: one model's files evaluate as before; a file of another model, or one saved in float16 beside float32
    ones, is named with its clean numbers in the message and the report."""
    agreeing = one_model_files(tmp_path / "one", IMAGE_GALLERIES)
    message, _, _, download = client.predict([handle_file(path) for path in agreeing], api_name="/evaluate")
    assert re.match(r"Scored 3 file\(s\) in \d+\.\d\d s, ties pessimistic, bootstrap 0:", message), message
    assert "disagree" not in message and "consistency" not in json.loads(Path(download).read_text())["meta"]

    other = one_model_files(tmp_path / "other", IMAGE_GALLERIES, seeds={"patch_seed10": 1})
    message, _, _, download = client.predict([handle_file(path) for path in other], api_name="/evaluate")
    saved = json.loads(Path(download).read_text())
    clean = saved["results"]["clean/text_to_image"]["recall@1"]
    patched = saved["results"]["patch_seed10/text_to_image"]["clean_recall@1"]
    assert clean != patched
    [found] = saved["meta"]["consistency"]
    assert f"Warnings about these numbers (the report records them too):\n- the files disagree: {found['message']}" \
        in message
    assert "The files disagree, so they are not one model's files saved alike: the leaderboard refuses them." in message
    assert "disagree (" not in message  # no stray count
    assert (f"{clean:.2f} ({round(clean * 152 / 100)} of 152 queries) from clean_text_to_image.npy (the clean "
            "gallery), mix_seed1_text_to_image.npy (the clean part of mix_seed1); "
            f"{patched:.2f} ({round(patched * 152 / 100)} of 152 queries) from patch_seed10_text_to_image.npy "
            "(the clean part of patch_seed10)") in found["message"]

    rounded = one_model_files(tmp_path / "half", IMAGE_GALLERIES, dtypes={"mix_seed1": np.float16}, close=True)
    message = client.predict([handle_file(path) for path in rounded], api_name="/evaluate")[0]
    assert ("The files were saved as float32 (clean_text_to_image.npy, patch_seed10_text_to_image.npy) and float16 "
            "(mix_seed1_text_to_image.npy): rounding to float16 ties and reorders close scores") in message


def test_the_leaderboard_refuses_files_that_disagree(board_app, tmp_path):
    """Issue 31: two files made independently gave clean R@1 80 and 90 and the board took both; now /submit refuses
    them, naming the files and the numbers, and takes one model's files."""
    from rococo_eval.board.leaderboard import Leaderboard

    url, database = board_app
    client = Client(url, verbose=False)
    galleries = [("clean", "image_to_text"), ("rand_voca", "image_to_text"), *IMAGE_GALLERIES]
    other = one_model_files(tmp_path / "other", galleries, seeds={"rand_voca": 1})
    layouts = rows(["rand_voca_image_to_text.npy", "", "", "official"])
    client.predict([handle_file(path) for path in other], layouts, api_name="/evaluate")
    with pytest.raises(AppError) as raised:
        client.predict("mixed model", "", "fp32", "", "", "all", api_name="/submit")
    refusal = str(raised.value)
    assert "the files of this evaluation disagree, so they are not one model's files saved alike: image-to-text: " \
           "the clean R@1 differs between files: " in refusal
    assert "from clean_image_to_text.npy (the clean gallery)" in refusal
    assert "from rand_voca_image_to_text.npy (the clean part of rand_voca)" in refusal
    assert "text-to-image" not in refusal  # the image attacks' files agree

    one = one_model_files(tmp_path / "one", galleries)
    answer = client.predict([handle_file(path) for path in one], layouts, api_name="/evaluate")
    assert client.predict("one model", "", "fp32", "", "", "submitted", api_name="/submit")[0].startswith(
        "added one model to the board; on the board it fills clean i2t, clean t2i, rand voca")
    [row] = Leaderboard(database).rows(kind="submitted")
    results = saved_results(answer)["results"]
    assert row["model"] == "one model"
    assert row["rand_voca R@1"] == round(results["rand_voca/image_to_text"]["recall@1"], 4)
    assert row["clean R@1 (i2t)"] == round(results["clean/image_to_text"]["recall@1"], 4)
    assert row["clean R@1 (t2i)"] == round(results["clean/text_to_image"]["recall@1"], 4)
