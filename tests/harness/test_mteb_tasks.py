"""RoCOCO's galleries as MTEB tasks: ``mteb.evaluate`` on them gives the hit rate at 1 and RoCOCO's own numbers that
``rococo-eval run`` (``rococo_recall``) gives on the same embeddings, and MTEB's results folder turns into run's
report. Real MTEB, real exported datasets (a generated benchmark and the RoCOCO-shaped export), a tiny model."""

import hashlib
import json
import math
import re
import subprocess
import sys

import datasets
import mteb
import numpy as np
import pytest

from helpers import REPO_ROOT
from rococo_eval.catalog import gallery_key
from rococo_eval.data.source import RococoSource, open_source
from rococo_eval.evaluation import evaluate_model
from rococo_eval.harness.mteb_tasks import (
    K_VALUES,
    MAIN_SCORE,
    as_mteb_encoder,
    mteb_tasks,
    query_ranks,
    rococo_scores,
    rococo_task,
)
from rococo_eval.harness.mteb_results import SCORE_PREFIX, TIED_QUERIES, report_from_mteb, results_from_mteb
from rococo_eval.reporting.report import summary_rows
from rococo_eval.scoring.embeddingsfile import read_embeddings_file, score_embeddings, write_embeddings_from_rows
from rococo_recall import DEFAULT_K

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_model(dataset, cache_dir):
    """A tiny model that knows the dataset's captions, so that its numbers are neither 0 nor 100: a caption is the sum
    of its words' vectors (one of its own per word, weighted by its place: no two captions of other words tie), an
    image the mean of its own captions' (an image is known by its 4 x 4 colour grid, an altered copy as the original
    nearest in colours) plus its colours, projected."""
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    from custom_model import DIMENSION, TinyColourModel

    class KnowsTheCaptions(TinyColourModel):
        name = "tiny-model"

        def __init__(self):
            super().__init__()
            self.words, self.of_caption, self.of_grid = {}, {}, {}  # each computed once: run's side and MTEB's
            # embed the same captions and images
            images = datasets.load_dataset(str(dataset), "images", split="test", cache_dir=str(cache_dir))
            captions = datasets.load_dataset(str(dataset), "captions", split="test", cache_dir=str(cache_dir))
            # whole columns at once (a column iterated, datasets formats each row alone)
            self.grids = np.stack([self.preprocess_image(image) for image in images["image"][:]]).astype(np.float64)
            self.grid_norms = (self.grids ** 2).sum(axis=1)
            sums = np.zeros((len(self.grids), DIMENSION), np.float32)
            np.add.at(sums, np.asarray(captions["image_index"][:]), self.encode_texts(captions["caption"][:]))
            self.meanings = sums / np.linalg.norm(sums, axis=1, keepdims=True)

        def word(self, word):
            if word not in self.words:
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
                self.words[word] = np.random.default_rng(seed).normal(size=DIMENSION).astype(np.float32)
            return self.words[word]

        def encode_texts(self, texts):
            return np.stack([self.caption(text) for text in texts])

        def caption(self, text):
            if text not in self.of_caption:
                self.of_caption[text] = sum((self.word(word) * (1 + 0.1 * position)
                                             for position, word in enumerate(re.findall(r"[a-z]+", text.lower()))),
                                            np.zeros(DIMENSION, np.float32))
            return self.of_caption[text]

        def encode_preprocessed(self, batch):
            keys = [row.tobytes() for row in batch]
            new = {key: row for key, row in zip(keys, batch) if key not in self.of_grid}
            if new:
                self.of_grid.update(zip(new, self._encode_grids(np.stack(list(new.values())))))
            return np.stack([self.of_grid[key] for key in keys])

        def _encode_grids(self, batch):
            batch = batch.astype(np.float64)  # squared distances to each grid, as sums of products (one BLAS call)
            nearest = np.argmin((batch ** 2).sum(axis=1)[:, None] - 2 * batch @ self.grids.T + self.grid_norms, axis=1)
            colours = super().encode_preprocessed(batch)
            return self.meanings[nearest] + 0.5 * colours / np.linalg.norm(colours, axis=1, keepdims=True)

    return KnowsTheCaptions()


def run_both_ways(source, dataset, attacks, tmp_path, tasks=None):
    """The same model through ``run``'s path (pessimistic ties, and optimistic from its embeddings file) and through
    ``mteb.evaluate`` on the dataset's tasks (default: all of ``attacks``' and the clean ones); returns (pessimistic,
    optimistic, MTEB's scores by gallery, MTEB's results)."""
    model = tiny_model(dataset, tmp_path / "hf")
    embeddings = tmp_path / "embeddings.safetensors"
    report = evaluate_model(model, source, attacks=attacks, cache_dir=tmp_path / "cache", save_embeddings=embeddings)
    vectors, metadata, covered = read_embeddings_file(embeddings, source)
    optimistic = score_embeddings(vectors, source, covered, metadata["similarity"], ties="optimistic")
    tasks = tasks or mteb_tasks(str(dataset), attacks, load_kwargs={"cache_dir": str(tmp_path / "hf")})
    results = mteb.evaluate(as_mteb_encoder(model), tasks=tasks, cache=mteb.ResultCache(tmp_path / "mteb"),
                            show_progress_bar=False)
    by_gallery = {task.gallery_key: result.scores["test"][0] for task, result in zip(tasks, results.task_results)}
    return report.results.metrics(), {key: result.metrics for key, result in optimistic.items()}, by_gallery, results


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def check_equal_where_no_ties(pessimistic, optimistic, mteb_scores):
    """MTEB puts an adversarial item that ties with a correct one first, as run's pessimistic policy; it counts the
    queries where a wrong clean item ties with the first correct one (``rococo_tied_queries``). Where there are
    none, every RoCOCO number is run's (pessimistic) to the last digit, and the hit rate at 1 is its R@1 as MTEB
    rounds it (5 digits); elsewhere the recalls lie between run's two policies. Returns the galleries without such
    ties."""
    assert set(mteb_scores) <= set(pessimistic)
    untied = []
    for key, scores in mteb_scores.items():
        low, high = pessimistic[key], optimistic[key]
        assert scores["main_score"] == scores[MAIN_SCORE]
        ours = {name[len(SCORE_PREFIX):]: value for name, value in scores.items()
                if name.startswith(SCORE_PREFIX) and name != SCORE_PREFIX + TIED_QUERIES}
        assert ours.keys() == low.keys(), key
        if scores[SCORE_PREFIX + TIED_QUERIES] == 0:
            untied.append(key)
            assert all(same(ours[name], low[name]) for name in low), (key, ours, low)
            assert scores[MAIN_SCORE] == round(low["recall@1"] / 100, 5), key
        else:
            for name in (name for name in low if "recall@" in name):
                assert low[name] <= ours[name] <= high[name], (key, name, ours[name], low[name], high[name])
            assert round(low["recall@1"] / 100, 5) <= scores[MAIN_SCORE] <= round(high["recall@1"] / 100, 5), key
    return untied


def test_mteb_on_a_generated_benchmark_gives_runs_numbers(benchmark, tmp_path):
    pessimistic, optimistic, mteb_scores, results = run_both_ways(open_source(benchmark=benchmark), benchmark, "all",
                                                                  tmp_path)
    assert len(mteb_scores) == 2 + 4 + 4  # clean both ways, 4 text attacks, mix and patch with seeds 1 and 7
    untied = check_equal_where_no_ties(pessimistic, optimistic, mteb_scores)
    assert len(untied) == 10, untied  # the tiny model's captions never tie
    # MTEB's recall_at_1 is another number: the share of a query's correct captions found (1 of 5 at best)
    found = {key: (scores["recall_at_1"], scores[MAIN_SCORE]) for key, scores in mteb_scores.items()
             if key.endswith("image_to_text")}
    assert all(recall < hit for recall, hit in found.values() if hit > 0), found
    assert any(hit > 0 for _, hit in found.values()), found

    # (MTEB's files keep 6 decimals: the counts of queries behind them give back every digit)
    folder_report = report_from_mteb(tmp_path / "mteb", out=tmp_path / "report")
    object_report = report_from_mteb(results)
    run_rows = {(row["attack"], row["direction"]): row for row in summary_rows(pessimistic)}
    for report in (folder_report, object_report):
        rows = {(row.attack, row.direction): row.to_dict() for row in report.summary}
        assert all(rows[tuple(key.split("/"))] == run_rows[tuple(key.split("/"))] for key in untied)
    assert all(report.results[key].metrics == pessimistic[key] for key in untied for report in (folder_report,
                                                                                                   object_report))
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert written["results"] == folder_report.results.metrics()
    assert written == json.loads(folder_report.to_json())
    assert written["meta"]["model"] == "rococo-eval/tiny-model"
    assert (tmp_path / "report" / "report.md").read_text().startswith("# RoCOCO report: rococo-eval/tiny-model")

    # the command does the same, and `table` compares its report with run's
    subprocess.run([sys.executable, "-m", "rococo_eval", "from-mteb", str(tmp_path / "mteb"), "--out",
                    str(tmp_path / "command"), "--model-name", "tiny (MTEB)", "--quiet"], check=True,
                   capture_output=True, cwd=tmp_path)
    command_report = json.loads((tmp_path / "command" / "report.json").read_text())
    assert command_report["results"] == written["results"] and command_report["meta"]["model"] == "tiny (MTEB)"
    table = subprocess.run([sys.executable, "-m", "rococo_eval", "table", str(tmp_path / "command"),
                            str(tmp_path / "report"), "--out", str(tmp_path / "table"), "--quiet"], check=True,
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert "tiny (MTEB)" in table and "rococo-eval/tiny-model" in table


@pytest.mark.slow
def test_mteb_on_the_rococo_shaped_export_ranks_each_query_as_run(annotations_dir, coco_root, export_folder, tmp_path):
    """RoCOCO's own galleries: 5,000 images against 50,010 captions (25,000 adversarial; MTEB scores them in chunks
    of 50,000 and 10), and 25,010 captions against 10,000 images (5,000 patched). COCO has captions that tie (the
    same words for two images), so the check is query by query: every query that no tie decides has MTEB's rank,
    clean rank and top item as run's scorer gives them on the same embeddings; the others lie between run's two tie
    policies. Run's side scores the model's embeddings of the export's rows, the rows MTEB reads, as an embeddings
    file (which scores to run's every per-query result: ``test_embeddingsfile``; ``run`` itself is compared with MTEB
    end to end on the generated benchmark above)."""
    source = RococoSource(annotations_dir, images_dir=coco_root)
    model = tiny_model(export_folder, tmp_path / "hf")
    attacks = ["rand_voca", "patch_seed10"]
    rows = {}
    for config, split in (("images", "test"), ("captions", "test"), ("rand_voca", "adversarial"),
                          ("patch_seed10", "adversarial")):
        table = datasets.load_dataset(str(export_folder), config, split=split, cache_dir=str(tmp_path / "hf"))
        rows[config, split] = np.concatenate([
            model.encode_images(table[start:start + 500]["image"]) if "image" in table.column_names else
            model.encode_texts(table[start:start + 500]["caption"]) for start in range(0, len(table), 500)])
    embeddings = write_embeddings_from_rows(tmp_path / "rows.safetensors", rows, source, model.name)
    vectors, metadata, covered = read_embeddings_file(embeddings, source)
    galleries = {ties: score_embeddings(vectors, source, covered, metadata["similarity"], ties=ties)
                 for ties in ("pessimistic", "optimistic")}
    tasks = [rococo_task(str(export_folder), attack, load_kwargs={"cache_dir": str(tmp_path / "hf")})
             for attack in attacks]
    results = mteb.evaluate(as_mteb_encoder(model), tasks=tasks, cache=None,
                            prediction_folder=tmp_path / "predictions", show_progress_bar=False)
    keys = [task.gallery_key for task in tasks]
    assert keys == ["rand_voca/image_to_text", "patch_seed10/text_to_image"]
    check_equal_where_no_ties({key: galleries["pessimistic"][key].metrics for key in keys},
                              {key: galleries["optimistic"][key].metrics for key in keys},
                              {key: result.scores["test"][0] for key, result in zip(keys, results.task_results)})

    for task, key, shape in zip(tasks, keys, [(5000, 50010), (25010, 10000)]):
        name = task.metadata.name
        predictions = json.loads(next((tmp_path / "predictions").glob(f"{name}*.json")).read_text())
        task.load_data()
        split = task.dataset["default"]["test"]
        assert (len(split["queries"]), len(split["corpus"])) == shape
        ranks = query_ranks(split["relevant_docs"], predictions["default"]["test"], task.adversarial_ids,
                            max(DEFAULT_K))
        assert len(max(predictions["default"]["test"].values(), key=len)) == max(K_VALUES)  # MTEB keeps its top 100
        runs = {ties: galleries[ties][key].per_query for ties in ("pessimistic", "optimistic")}
        decided = np.ones(shape[0], dtype=bool)
        # ranks as far as MTEB's top 100 tell them, clean ranks as far as the cut-offs 1, 5 and 10 need them
        for field, found, cap in (("rank", ranks.rank, max(K_VALUES)),
                                  ("clean_rank", ranks.clean_rank, max(DEFAULT_K))):
            found = np.minimum(found, cap)
            low, high = (np.minimum(runs[ties][field], cap) for ties in ("optimistic", "pessimistic"))
            assert ((low <= found) & (found <= high)).all(), (name, field)
            decided &= low == high
            assert (found[low == high] == low[low == high]).all(), (name, field)
        assert (ranks.top1_adversarial[decided] == runs["pessimistic"]["top1_adversarial"][decided]).all(), name
        assert decided.mean() >= 0.98, (name, int(decided.sum()))  # ties decide a few queries only
        assert 0 < (ranks.rank == 0).sum() < shape[0] and ranks.top1_adversarial.any(), name  # telling numbers


def test_a_task_holds_the_galleries_rows_and_the_paper(benchmark, tmp_path):
    task = rococo_task(str(benchmark), "rand_voca", load_kwargs={"cache_dir": str(tmp_path)})
    assert task.metadata.name == "RoCOCORandVocaI2TRetrieval" and task.metadata.main_score == MAIN_SCORE
    assert task.metadata.reference == "https://arxiv.org/abs/2304.10727"
    assert "2304.10727" in task.metadata.bibtex_citation
    assert task.metadata.license == "mit" and task.metadata.category == "i2t"
    task.load_data()
    split = task.dataset["default"]["test"]
    assert len(split["queries"]) == task.counts["num_queries"]
    assert len(split["corpus"]) == task.counts["num_gallery"]
    assert set(split["corpus"].column_names) == {"id", "text"} and set(split["queries"].column_names) == {"id", "image"}
    relevant = {item for items in split["relevant_docs"].values() for item in items}
    assert relevant.isdisjoint(task.adversarial_ids) and len(task.adversarial_ids) == task.counts["num_adversarial"]
    assert all(item.startswith("decoy-") for item in task.adversarial_ids)


def test_ties_follow_the_ids_adversarial_first():
    """An adversarial item that ties with the correct one ranks above it (as ties="pessimistic"); clean numbers need
    enough retrieved clean items."""
    qrels = {"q": {"clean-000000": 1}}
    counts = {"num_queries": 1, "num_gallery": 2, "num_adversarial": 1}
    scores = rococo_scores(qrels, {"q": {"clean-000000": 0.5, "decoy-000001": 0.5}}, {"decoy-000001"}, counts, k=1)
    assert scores["rococo_recall@1"] == 0.0 and scores["rococo_clean_recall@1"] == 100.0
    assert scores["rococo_false_rate"] == 100.0 and scores["rococo_attack_success_rate"] == 100.0
    with pytest.raises(ValueError, match="too few to tell its clean rank"):
        rococo_scores(qrels, {"q": {"decoy-000001": 0.9}}, {"decoy-000001"}, counts, k=(1, 5))


def from_mteb(folder, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rococo_eval", "from-mteb", str(folder), "--out", str(out)],
                          capture_output=True, text=True, cwd=out.parent)


def test_results_without_rococo_tasks_are_refused_naming_the_folder_and_what_it_holds(tmp_path):
    """Missing, a file, empty, other tasks' files: each said, with the folder's name; and no report folder made."""
    (tmp_path / "empty").mkdir()
    other = tmp_path / "other" / "a-model" / "1"
    other.mkdir(parents=True)
    (other / "STS12.json").write_text("{}")
    (other / "model_meta.json").write_text("{}")
    (tmp_path / "a-file").write_text("")
    expected = {"missing": "does not exist", "a-file": "is a file, not a folder",
                "empty": "is empty: it should hold RoCOCO<Attack>I2TRetrieval.json or "
                         "RoCOCO<Attack>T2IRetrieval.json",
                "other": "holds 2 files (a-model/1/STS12.json, a-model/1/model_meta.json) but no result of a RoCOCO "
                         "task: it should hold RoCOCO<Attack>I2TRetrieval.json"}
    for name, said in expected.items():
        message = f"MTEB results folder {str(tmp_path / name)!r} {said}"
        with pytest.raises(ValueError) as refused:
            results_from_mteb(tmp_path / name)
        assert message in str(refused.value)
        done = from_mteb(tmp_path / name, tmp_path / "out")
        assert done.returncode == 1 and f"rococo-eval: error: {message}" in done.stderr
        assert not (tmp_path / "out").exists()
    wanted = r"RoCOCO<Attack>I2TRetrieval or RoCOCO<Attack>T2IRetrieval, or RoCOCO-<attack>-I2T or -T2I"
    with pytest.raises(ValueError, match=rf"hold no RoCOCO task \({wanted}\); they hold no task"):
        results_from_mteb([])


def test_the_docs_mteb_example_runs_and_writes_the_report(benchmark, tmp_path):
    """``examples/mteb_rococo.py`` (shown in docs/harness.md) as a user runs it."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "mteb_rococo.py"), "--dataset", str(benchmark),
                           "--results", str(tmp_path / "results"), "--out", str(tmp_path / "report")],
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    lines = done.stdout.splitlines()
    names = [task.metadata.name for task in mteb_tasks(str(benchmark))]
    assert [line.split()[0] for line in lines[:10]] == names
    printed = json.loads(lines[-1])
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [row["R@1"] for row in printed] == [row["recall@1"] for row in written["summary"]]
    assert printed[0]["gallery"] == "clean/image_to_text" and len(printed) == 12  # 10 galleries, 2 seed means
