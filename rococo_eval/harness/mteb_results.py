"""MTEB's results of the RoCOCO tasks (:mod:`rococo_eval.harness.mteb_tasks`) turned into rococo-eval's results and
report, without MTEB: what ``mteb.evaluate`` returned, or the results folder its ``ResultCache`` wrote.

The tasks put RoCOCO's numbers in their scores under :data:`SCORE_PREFIX` names (``rococo_recall@1``, ...), with the
counts of queries, and the number of queries whose rank a tie between a correct and a wrong clean item decides (MTEB
orders such items by their id; ``rococo_tied_queries``). MTEB's files round every score to 6 decimals:
:func:`exact_numbers` reads the counts of queries back and makes each percentage again with the metric's own
:func:`rococo_recall.percentages`, so that :func:`report_from_mteb` writes the numbers ``run`` would, to the last
digit. ``rococo-eval from-mteb`` is its command.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import rococo_eval.validity as validity
from rococo_eval.catalog import CLEAN, IMAGE_TO_TEXT, TEXT_TO_IMAGE, gallery_key
from rococo_eval.reporting.report import summary_rows, write_report
from rococo_eval.results import GalleryResult
from rococo_recall import percentages

SCORE_PREFIX = "rococo_"  # RoCOCO's own numbers in an MTEB task's scores: rococo_recall@1, rococo_false_rate, ...
TIED_QUERIES = "tied_queries"  # rococo_tied_queries: queries whose rank MTEB's order of tied items decides
TASK_NAME = "RoCOCO-{attack}-{short}"
SHORT_DIRECTIONS = {IMAGE_TO_TEXT: "I2T", TEXT_TO_IMAGE: "T2I"}
COUNTS = ("num_queries", "num_gallery", "num_adversarial")


def results_from_mteb(results: Any) -> tuple[dict[str, GalleryResult], dict[str, int]]:
    """rococo-eval's results by gallery key from MTEB's: a ``ModelResult`` (what ``mteb.evaluate`` returns), a list
    of ``TaskResult``, or a results folder (``<folder>/<model>/<revision>/RoCOCO-*.json``, as MTEB's ``ResultCache``
    writes it). Tasks that are not RoCOCO's are skipped.

    Returns:
        ``(results, tied)``: the results, and by gallery the number of queries (when any) whose rank a tie between
        a correct and a wrong clean item decided in MTEB's order (``run``'s pessimistic policy may rank them lower).

    Raises:
        ValueError: no RoCOCO task in ``results``, or two results for one gallery (give one model's folder).
    """
    found: dict[str, GalleryResult] = {}
    tied: dict[str, int] = {}
    for name, scores in _task_scores(results):
        attack, short = _parse_task_name(name)
        if attack is None:
            continue
        direction = IMAGE_TO_TEXT if short == "I2T" else TEXT_TO_IMAGE
        key = gallery_key(attack, direction)
        if key in found:
            raise ValueError(f"two results for {name!r} in the MTEB results given: give one model's results")
        metrics, tied[key] = {}, int(scores.get(SCORE_PREFIX + TIED_QUERIES, 0))
        for score_name, value in scores.items():
            if score_name == SCORE_PREFIX + TIED_QUERIES:
                continue
            if score_name.startswith(SCORE_PREFIX):
                metric = score_name[len(SCORE_PREFIX):]
                metrics[metric] = int(value) if metric in COUNTS else (math.nan if value is None else float(value))
        if "recall@1" not in metrics or "num_queries" not in metrics:
            raise ValueError(f"MTEB's result of {name!r} has no {SCORE_PREFIX} scores: it was made by another task")
        found[key] = GalleryResult(exact_numbers(metrics, name))
    if not found:
        raise ValueError("the MTEB results given hold no RoCOCO task (RoCOCO-<attack>-I2T or -T2I)")
    ordered = dict(sorted(found.items(), key=lambda item: (item[0].split("/")[0] != CLEAN, item[0])))
    return ordered, {key: count for key, count in tied.items() if count}


def exact_numbers(metrics: Mapping[str, float], where: str = "") -> dict:
    """RoCOCO's numbers with every digit, from the 6 decimals MTEB's results files keep: each percentage is a count
    of queries over ``num_queries`` (the attack success rate, over the clean hits at 1), so the counts are read back
    and the percentages made again by the metric's own :func:`rococo_recall.percentages`.

    Raises:
        ValueError: a number that no count of queries rounds to (the file was not made by these tasks).

    Example:
        >>> exact = exact_numbers({"recall@1": 33.333333, "r_mean": 33.333333, "false_rate": 0.0,
        ...                        "clean_recall@1": 66.666667, "clean_r_mean": 66.666667,
        ...                        "attack_success_rate": 50.0, "num_queries": 3, "num_gallery": 9,
        ...                        "num_adversarial": 3})
        >>> exact["recall@1"], exact["clean_recall@1"]
        (33.333333333333336, 66.66666666666667)
    """
    ks = tuple(int(name.split("@")[1]) for name in metrics if name.startswith("recall@"))
    total = int(metrics["num_queries"])

    def count(name: str, out_of: int) -> int:
        value = metrics[name]
        counted = round(value * out_of / 100) if out_of and not math.isnan(value) else 0
        if out_of and not math.isnan(value) and abs(100.0 * counted / out_of - value) > 1e-6 * max(1.0, abs(value)):
            raise ValueError(f"{where or 'results'}: {name} {value} is no count of {out_of} queries")
        return counted

    names = [*(f"recall@{k}" for k in ks), *(f"clean_recall@{k}" for k in ks), "false_rate"]
    counts = [count(name, total) for name in names]
    clean_hits = count("clean_recall@1", total)
    numbers = percentages(names + ["clean_top1", "attacked"],
                          counts + [clean_hits, count("attack_success_rate", clean_hits)], total, ks)
    return {name: numbers.get(name, value) for name, value in metrics.items()}


def report_from_mteb(results: Any, out=None, *, model_name: Optional[str] = None) -> dict:
    """rococo-eval's report of MTEB's results (:func:`results_from_mteb`): ``{"meta", "results", "summary"}`` as
    ``rococo-eval run`` returns it, written with ``out`` (``report.json``, ``report.md``, ``recall.png``,
    ``model-card.md``) so that the table and the Space's leaderboard read it as they read ``run``'s. ``meta`` holds
    ``scored_by: mteb`` and, when ties decided some queries' ranks, ``tied_queries`` by gallery and a validity
    warning (:mod:`rococo_eval.validity`; in ``warnings``, and on stderr)."""
    gallery_results, tied = results_from_mteb(results)
    meta = {"model": model_name or _model_name(results), "scored_by": "mteb"}
    if tied:
        meta["tied_queries"] = tied
        with validity.recorded() as warnings:
            validity.warn("MTEB ordered tied items by id for %s: run's pessimistic ties may give lower numbers there",
                          ", ".join(f"{count} queries of {key}" for key, count in tied.items()))
        meta.update(validity.report_entries(warnings))
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_report(gallery_results, Path(out), meta)
    metrics = {key: result.metrics for key, result in gallery_results.items()}
    return {"meta": meta, "results": metrics, "summary": summary_rows(metrics)}



def _parse_task_name(name: str) -> tuple[Optional[str], Optional[str]]:
    """``(attack, "I2T" or "T2I")`` of a RoCOCO task's name (:data:`TASK_NAME`), else ``(None, None)``."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "RoCOCO" or parts[2] not in SHORT_DIRECTIONS.values():
        return None, None
    return parts[1], parts[2]


def _task_scores(results: Any) -> Iterable[tuple[str, dict]]:
    """``(task name, test scores)`` of each task result in ``results`` (see :func:`results_from_mteb`)."""
    if isinstance(results, (str, Path)):
        folder = Path(results)
        if not folder.is_dir():
            raise ValueError(f"{str(results)!r} is not an MTEB results folder (no such folder)")
        for path in sorted(folder.rglob("RoCOCO-*.json")):
            document = json.loads(path.read_text(encoding="utf-8"))
            yield document["task_name"], _test_scores(document["scores"], path)
        return
    task_results = getattr(results, "task_results", results)
    for task_result in task_results:
        yield task_result.task_name, _test_scores(task_result.scores, task_result.task_name)


def _test_scores(scores: Mapping[str, list], where) -> dict:
    if "test" not in scores or len(scores["test"]) != 1:
        raise ValueError(f"{where}: expected one 'test' result, found splits {sorted(scores)}")
    return dict(scores["test"][0])


def _model_name(results: Any) -> Optional[str]:
    if isinstance(results, (str, Path)):
        names = {path.parent.parent.name for path in Path(results).rglob("RoCOCO-*.json")}
        return names.pop().replace("__", "/") if len(names) == 1 else None
    return getattr(results, "model_name", None)
