"""rococo_eval.harness.mteb_results reads MTEB's result files as an attacker or a faulty disk may write them: every
number it reports is one the RoCOCO tasks can make, and every other file is refused in one line that names the file
and the field, by ``results_from_mteb`` and by ``rococo-eval from-mteb`` (exit 1, nothing written), within bounds.

The hostile files are made here, from one valid result (:func:`result_document`), by :func:`hostile_results`.
"""

import json
import math
import os
import sys
import time

import pytest

from helpers.memory_limit import run_under_memory_limit
from helpers.sparse_files import sparse_file
from rococo_eval.cli import main
from rococo_eval.catalog import CLEAN, IMAGE_ATTACKS, IMAGE_TO_TEXT, TEXT_ATTACKS, TEXT_TO_IMAGE
from rococo_eval.harness.mteb_results import (MAX_RESULTS_FILE_BYTES, gallery_of_task_name, report_from_mteb,
                                              results_from_mteb, task_name)

TASK = "RoCOCORandVocaI2TRetrieval"
OLD_TASK = "RoCOCO-rand_voca-I2T"  # the name that versions before MTEB's style wrote in their results


def result_document(task_name=TASK):
    """What MTEB's ``ResultCache`` writes for a RoCOCO task (a few of MTEB's own scores and metadata kept): 4 image
    queries against 20 clean and 20 adversarial captions; 2 queries' first caption is a correct clean one, and 1 of
    them is beaten by an adversarial caption."""
    rococo = {"recall@1": 25.0, "recall@5": 50.0, "recall@10": 75.0, "r_mean": 50.0, "false_rate": 25.0,
              "clean_recall@1": 50.0, "clean_recall@5": 75.0, "clean_recall@10": 100.0, "clean_r_mean": 75.0,
              "attack_success_rate": 50.0, "num_queries": 4.0, "num_gallery": 40.0, "num_adversarial": 20.0,
              "tied_queries": 0.0}
    test = {"ndcg_at_1": 0.25, "recall_at_1": 0.05, "main_score": 0.25, "hf_subset": "default",
            "languages": ["eng-Latn"], **{f"rococo_{name}": value for name, value in rococo.items()}}
    return {"dataset_revision": "1e1d0ccb3375c209", "task_name": task_name, "mteb_version": "2.26.24",
            "scores": {"test": [test]}, "evaluation_time": 0.28, "kg_co2_emissions": None}


def with_scores(**changes):
    """The valid document with some ``rococo_`` scores changed (a value of ``...`` removes one)."""
    document = result_document()
    scores = document["scores"]["test"][0]
    for name, value in changes.items():
        if value is ...:
            del scores[f"rococo_{name}"]
        else:
            scores[f"rococo_{name}"] = value
    return document


def changed(path, value):
    """The valid document with the field at ``path`` (keys and list positions) set to ``value``."""
    document = result_document()
    *parents, last = path
    holder = document
    for key in parents:
        holder = holder[key]
    holder[last] = value
    return document


def hostile_results():
    """``(what is wrong, the file's bytes, what the refusal names besides the file)``: one valid result file changed
    in one way, as a faulty writer or an attacker would."""
    def case(what, document, names):
        return what, document if isinstance(document, bytes) else json.dumps(document).encode(), names

    # numbers no RoCOCO task writes
    yield case("a null R@1", with_scores(**{"recall@1": None}), "`rococo_recall@1` must be a percentage from 0 to 100, "
                                                                  "got null")
    yield case("R@1 of 150", with_scores(**{"recall@1": 150.0}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 of -25", with_scores(**{"recall@1": -25.0}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 a string", with_scores(**{"recall@1": "25"}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 true", with_scores(**{"recall@1": True}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 a list", with_scores(**{"recall@1": [25.0]}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 a huge int", with_scores(**{"recall@1": 10 ** 400}), "`rococo_recall@1` must be a percentage")
    yield case("R@1 NaN", json.dumps(with_scores(**{"recall@1": math.nan})).encode(), "`rococo_recall@1` must be")
    yield case("R@5 Infinity", json.dumps(with_scores(**{"recall@5": math.inf})).encode(), "`rococo_recall@5` must")
    yield case("a negative count", with_scores(num_queries=-4.0), "`rococo_num_queries` must be a count from 0 to")
    yield case("a count of 1e30", with_scores(num_gallery=1e30), "`rococo_num_gallery` must be a count")
    yield case("a count of 10**400", with_scores(num_gallery=10 ** 400), "`rococo_num_gallery` must be a count")
    yield case("a count -Infinity", json.dumps(with_scores(num_adversarial=-math.inf)).encode(),
               "`rococo_num_adversarial` must be a count")
    yield case("a fractional count", with_scores(num_queries=4.5), "`rococo_num_queries` must be a count")
    yield case("0 queries", with_scores(num_queries=0.0), "`rococo_num_queries` 0 counts nothing")
    yield case("more adversarial items than the gallery", with_scores(num_adversarial=41.0),
               "`rococo_num_adversarial` 41 is over the gallery's 40 items")
    yield case("more tied queries than queries", with_scores(tied_queries=5.0), "`rococo_tied_queries` 5 is over")
    yield case("R@5 below R@1", with_scores(**{"recall@5": 20.0}), "`rococo_recall@5` 20 is below `rococo_recall@1` 25")
    yield case("R@1 over the clean R@1", with_scores(**{"recall@1": 75.0, "recall@5": 75.0}),
               "`rococo_recall@1` 75 is over `rococo_clean_recall@1` 50")
    yield case("a false rate with R@1 over 100", with_scores(false_rate=100.0),
               "`rococo_false_rate` 100 leaves no room for `rococo_recall@1` 25")
    yield case("a null attack success rate with clean hits", with_scores(attack_success_rate=None),
               "`rococo_attack_success_rate` nan with `rococo_clean_recall@1` 50")
    yield case("R@1 no count of the queries", with_scores(**{"recall@1": 33.333333}),
               "`rococo_recall@1` 33.333333 is no count of 4 queries")
    # fields missing or unknown
    yield case("no R@1", with_scores(**{"recall@1": ...}), "no `rococo_recall@1` in the test scores")
    yield case("no count of queries", with_scores(num_queries=...), "no `rococo_num_queries` in the test scores")
    yield case("no clean R@10", with_scores(**{"clean_recall@10": ...}), "`rococo_clean_recall@K` name other Ks")
    yield case("an unknown RoCOCO field", with_scores(**{"recall@x": 5.0}), "`rococo_recall@x` is none of RoCOCO's")
    yield case("no task_name", {key: value for key, value in result_document().items() if key != "task_name"},
               "`task_name` must be a string, got null")
    yield case("no scores", {key: value for key, value in result_document().items() if key != "scores"},
               "`scores` must be an object of MTEB's splits, got null")
    yield case("no test split", changed(["scores"], {"dev": []}), "`scores.test` must be a list of one object (MTEB's "
                                                                  "result of the test split), got the splits ['dev']")
    # galleries RoCOCO does not have
    yield case("an unknown attack", result_document("RoCOCO-foo-I2T"),
               "`task_name` 'RoCOCO-foo-I2T' names a gallery RoCOCO does not have: `attack` must be one of")
    yield case("a text attack scored text-to-image", result_document("RoCOCO-rand_voca-T2I"),
               "`task_name` 'RoCOCO-rand_voca-T2I' names a gallery RoCOCO does not have: attack 'rand_voca' is scored "
               "image_to_text, not text_to_image")
    yield case("an image attack scored image-to-text", result_document("RoCOCO-mix_seed1-I2T"),
               "attack 'mix_seed1' is scored text_to_image")
    yield case("no direction", result_document("RoCOCO-clean-X2Y"), "`task_name` 'RoCOCO-clean-X2Y' is no RoCOCO task")
    yield case("a dash in the attack", result_document("RoCOCO-rand-voca-I2T"), "is no RoCOCO task's name")
    yield case("an unknown attack, MTEB's style", result_document("RoCOCOFooI2TRetrieval"),
               "`task_name` 'RoCOCOFooI2TRetrieval' names a gallery RoCOCO does not have: `attack` must be one of")
    yield case("a text attack scored text-to-image, MTEB's style", result_document("RoCOCORandVocaT2IRetrieval"),
               "attack 'rand_voca' is scored image_to_text, not text_to_image")
    yield case("no Retrieval", result_document("RoCOCORandVocaI2T"), "`task_name` 'RoCOCORandVocaI2T' is no RoCOCO")
    yield case("an underscore, MTEB's style", result_document("RoCOCORand_vocaI2TRetrieval"), "is no RoCOCO task's")
    yield case("lower case, MTEB's style", result_document("RoCOCOrandvocaI2TRetrieval"), "is no RoCOCO task's name")
    # wrong types at each level
    for what, value in [("a list", []), ("a string", "RoCOCO"), ("a number", 7), ("null", None)]:
        yield case(f"a top level of {what}", json.dumps(value).encode(), "not an MTEB result")
    yield case("task_name a number", changed(["task_name"], 5), "`task_name` must be a string, got 5")
    yield case("scores a list", changed(["scores"], [1]), "`scores` must be an object of MTEB's splits, got [1]")
    yield case("scores.test an object", changed(["scores", "test"], {"a": 1}), "`scores.test` must be a list of one")
    yield case("scores.test empty", changed(["scores", "test"], []), "`scores.test` must be a list of one object")
    yield case("scores.test of two", changed(["scores", "test"], [{}, {}]), "`scores.test` must be a list of one")
    yield case("scores.test[0] a string", changed(["scores", "test", 0], "x"), "`scores.test` must be a list of one")
    # no JSON, or JSON that would cost the parser its stack
    yield case("an empty file", b"", "not valid MTEB result JSON (Expecting value")
    yield case("not JSON", b"<html>", "not valid MTEB result JSON")
    yield case("not UTF-8", b'{"task_name": "\xff\xfe"}', "not valid MTEB result JSON")
    yield case("an int of 5,000 digits", b'{"task_name": ' + b"1" * 5000 + b"}", "not valid MTEB result JSON")
    yield case("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "the MTEB result JSON nests 100000 deep")
    yield case("scores nested 100,000 deep", json.dumps(changed(["scores"], "DEEP")).encode().replace(
        b'"DEEP"', b"[" * 100_000 + b"]" * 100_000), "the MTEB result JSON nests 100001 deep")


HOSTILE = list(hostile_results())


def results_folder(tmp_path, content: bytes, task=TASK):
    """A results folder as MTEB's ``ResultCache`` lays it out, holding one task's file of ``content``."""
    path = tmp_path / "results" / "org__model" / "revision" / f"{task}.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return tmp_path / "results", path


def test_task_names_follow_mtebs_style_and_read_back_to_their_gallery():
    """Every gallery's task name (a generated benchmark's seed 7 too) is in MTEB's style and names its gallery
    again; so does the name earlier versions wrote (``RoCOCO-<attack>-<I2T or T2I>``)."""
    galleries = [(attack, IMAGE_TO_TEXT) for attack in (CLEAN, *TEXT_ATTACKS)] + \
                [(attack, TEXT_TO_IMAGE) for attack in (CLEAN, *IMAGE_ATTACKS, "mix_seed7", "patch_seed7")]
    for attack, direction in galleries:
        name = task_name(attack, direction)
        assert name.startswith("RoCOCO") and name.endswith("Retrieval") and not {"-", "_"} & set(name), name
        old = f"RoCOCO-{attack}-{'I2T' if direction == IMAGE_TO_TEXT else 'T2I'}"
        assert gallery_of_task_name(name) == gallery_of_task_name(old) == (attack, direction)
    assert task_name("same_concept", IMAGE_TO_TEXT) == "RoCOCOSameConceptI2TRetrieval"
    assert task_name("mix_seed7", TEXT_TO_IMAGE) == "RoCOCOMixSeed7T2IRetrieval"
    assert [gallery_of_task_name(name) for name in ("MSCOCOI2TRetrieval", "RoCOCOSameConceptI2T")] == [None, None]


@pytest.mark.parametrize("task", [TASK, OLD_TASK])
def test_the_valid_result_gives_its_numbers(tmp_path, capsys, task):
    """The file every hostile one is made from is read, and ``from-mteb`` writes its report; under the name that
    earlier versions wrote too."""
    folder, _ = results_folder(tmp_path, json.dumps(result_document(task)).encode(), task)
    results, tied = results_from_mteb(folder)
    assert results["rand_voca/image_to_text"].metrics["recall@1"] == 25.0 and tied == {}
    assert main(["from-mteb", str(folder), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    assert json.loads((tmp_path / "report" / "report.json").read_text())["results"]["rand_voca/image_to_text"][
        "attack_success_rate"] == 50.0
    assert capsys.readouterr().err == ""


def test_no_clean_hit_gives_a_nan_attack_success_rate(tmp_path):
    """MTEB writes NaN (or null) for the attack success rate when no query had a clean hit: that is possible."""
    for written in (b"NaN", b"null"):
        document = with_scores(**{"recall@1": 0.0, "clean_recall@1": 0.0, "false_rate": 0.0, "r_mean": 41.666667,
                                  "clean_r_mean": 58.333333, "attack_success_rate": "ASR"})
        content = json.dumps(document).encode().replace(b'"ASR"', written)
        folder, _ = results_folder(tmp_path / written.decode(), content)
        assert math.isnan(results_from_mteb(folder)[0]["rand_voca/image_to_text"].metrics["attack_success_rate"])


@pytest.mark.parametrize("content, names", [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_a_hostile_result_file_is_refused_in_one_line_naming_the_file_and_the_field(tmp_path, capsys, content, names):
    folder, path = results_folder(tmp_path, content)
    with pytest.raises(ValueError) as refusal:
        results_from_mteb(folder)
    message = str(refusal.value)
    assert message.startswith(f"{path}: ") and names in message and "\n" not in message
    with pytest.raises(ValueError, match="^" + str(path)):
        report_from_mteb(folder, out=tmp_path / "report")

    assert main(["from-mteb", str(folder), "--out", str(tmp_path / "command")]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"rococo-eval: error: {message}"] and captured.out == ""
    assert not (tmp_path / "report").exists() and not (tmp_path / "command").exists()


def test_a_hostile_result_object_is_refused_naming_the_task(tmp_path):
    """``mteb.evaluate``'s own objects are checked as the files are: the error names the task."""
    class TaskResult:
        task_name = TASK
        scores = with_scores(**{"recall@1": 150.0})["scores"]

    with pytest.raises(ValueError, match=f"^{TASK}: `rococo_recall@1` must be a percentage from 0 to 100, got 150.0$"):
        results_from_mteb([TaskResult()])


def test_a_folder_named_as_a_result_file_is_refused_naming_it(tmp_path, capsys):
    folder, path = results_folder(tmp_path, b"{}")
    path.unlink()
    path.mkdir()
    with pytest.raises(ValueError, match=f"^{path}: not a file$"):
        results_from_mteb(folder)


def test_a_sparse_2_gb_result_file_is_refused_at_once_under_a_memory_limit(tmp_path):
    """A 2 GB file (a hole: nothing written) is refused by its size, before a byte is read: under a 1 GB address
    space, as one line, within seconds."""
    folder, path = results_folder(tmp_path, b"")
    sparse_file(path, 2 << 30, head=json.dumps(result_document()).encode()[:-1] + b", ")
    started = time.monotonic()
    done = run_under_memory_limit([sys.executable, "-m", "rococo_eval", "from-mteb", str(folder), "--out",
                                   str(tmp_path / "report")], limit_bytes=1 << 30, timeout_s=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"rococo-eval: error: {path}: the file is 2147483648 bytes (2.0 GB), over the "
                                        f"limit of {MAX_RESULTS_FILE_BYTES} bytes (1.0 MB)"]
    assert time.monotonic() - started < 30 and not (tmp_path / "report").exists()
    assert os.path.getsize(path) == 2 << 30


def test_results_of_two_models_are_refused_naming_both_folders(tmp_path):
    """Each gallery once, but from two models (or two revisions): one report would mix their numbers."""
    folder = tmp_path / "results"
    for model, task in (("org__a", TASK), ("org__b", "RoCOCOCleanI2TRetrieval")):
        path = folder / model / "revision" / f"{task}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(result_document(task)))
    message = (f"MTEB results folder {str(folder)!r} holds RoCOCO results in 2 folders "
               f"({folder / 'org__a' / 'revision'}, {folder / 'org__b' / 'revision'}): give the folder of one model's "
               "results")
    with pytest.raises(ValueError) as refused:
        results_from_mteb(folder)
    assert str(refused.value) == message
    assert main(["from-mteb", str(folder), "--out", str(tmp_path / "report")]) == 1
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("results, said", [
    (5, "`results` must be a ModelResult, a list of TaskResult or a results folder, got 5"),
    (None, "`results` must be a ModelResult, a list of TaskResult or a results folder, got null"),
    ({"task_name": TASK}, "`results` must be a ModelResult, a list of TaskResult or a results folder, got {'task_name"),
    ([object()], "`results`[0]: `scores` must be an object of MTEB's splits, got null"),
    ([result_document()], "`results`[0]: `scores` must be an object of MTEB's splits, got null"),
])
def test_results_that_are_no_mteb_objects_are_refused_naming_the_argument(results, said):
    """``report_from_mteb`` takes what ``mteb.evaluate`` returns: anything else is a ValueError, not a TypeError or
    AttributeError."""
    with pytest.raises(ValueError) as refused:
        results_from_mteb(results)
    assert str(refused.value).startswith(said)


def test_one_gallerys_results_under_the_old_and_the_new_name_are_refused(tmp_path):
    """A folder that holds a gallery's result under the name earlier versions wrote and under MTEB's style (a run
    again with this version) gives two results for one gallery: refused, not one of them chosen."""
    folder = tmp_path / "results" / "org__model" / "revision"
    folder.mkdir(parents=True)
    for task in (OLD_TASK, TASK):
        (folder / f"{task}.json").write_text(json.dumps(result_document(task)))
    with pytest.raises(ValueError, match="two results for .* give one model's results"):
        results_from_mteb(tmp_path / "results")
