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

import math
import re
import reprlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import rococo_eval.validity as validity
from rococo_eval.catalog import CLEAN, IMAGE_TO_TEXT, TEXT_TO_IMAGE, check_direction, gallery_key
from rococo_eval.io.scorefiles import check_size, parse_json
from rococo_eval.reporting.report import write_report
from rococo_eval.results import GalleryKey, GalleryResult, Report, build_report
from rococo_recall import percentages

SCORE_PREFIX = "rococo_"  # RoCOCO's own numbers in an MTEB task's scores: rococo_recall@1, rococo_false_rate, ...
TIED_QUERIES = "tied_queries"  # rococo_tied_queries: queries whose rank MTEB's order of tied items decides
SHORT_DIRECTIONS = {IMAGE_TO_TEXT: "I2T", TEXT_TO_IMAGE: "T2I"}
TASK_PREFIX = "RoCOCO"  # every RoCOCO task's name starts with it; no other MTEB task's does
# The task names: MTEB's style (task_name), and the one earlier versions wrote in results (RoCOCO-rand_voca-I2T).
_TASK_NAME = re.compile(rf"{TASK_PREFIX}((?:[A-Z][a-z0-9]*)+?)(I2T|T2I)Retrieval")
_OLD_TASK_NAME = re.compile(rf"{TASK_PREFIX}-([a-z0-9_]+)-(I2T|T2I)")
COUNTS = ("num_queries", "num_gallery", "num_adversarial")
PERCENTAGES = ("r_mean", "clean_r_mean", "false_rate", "attack_success_rate")  # besides recall@K, clean_recall@K
_NAMES_WANTED = "RoCOCO<Attack>I2TRetrieval or RoCOCO<Attack>T2IRetrieval, or RoCOCO-<attack>-I2T or -T2I"
_RECALL = re.compile(r"(clean_)?recall@([1-9][0-9]{0,5})")
# 10 million queries or items: 200 times RoCOCO's largest gallery (50,010 captions), and about where a percentage's
# 6 decimals in MTEB's files stop telling one count of queries from the next (exact_numbers).
MAX_COUNT = 10_000_000
# One MTEB result file of a RoCOCO task holds a few kB: its scores and MTEB's metadata, nested 5 deep (the scores'
# splits, each split's list of subsets, a subset's languages).
MAX_RESULTS_FILE_BYTES = 1 << 20
MAX_RESULTS_JSON_DEPTH = 8


def results_from_mteb(results: Any) -> tuple[dict[str, GalleryResult], dict[str, int]]:
    """rococo-eval's results by gallery key from MTEB's: a ``ModelResult`` (what ``mteb.evaluate`` returns), a list
    of ``TaskResult``, or a results folder (``<folder>/<model>/<revision>/RoCOCO*.json``, as MTEB's ``ResultCache``
    writes it). Tasks that are not RoCOCO's are skipped.

    Returns:
        ``(results, tied)``: the results, and by gallery the number of queries (when any) whose rank a tie between
        a correct and a wrong clean item decided in MTEB's order (``run``'s pessimistic policy may rank them lower).

    Raises:
        ValueError: no RoCOCO task in ``results``, two results for one gallery or results in two folders (give one
            model's folder), or a result that these tasks cannot have made: a file that is no MTEB result (too large,
            nested too deep, not JSON, or fields of other types), a task of a gallery RoCOCO does not have, a missing or impossible number (a
            percentage outside 0 to 100, a count that is negative or over :data:`MAX_COUNT`, recalls that fall as K
            grows); each names the file (or the task) and the field.
    """
    found: dict[str, GalleryResult] = {}
    tied: dict[str, int] = {}
    others = []
    for name, scores, where in _task_scores(results):
        gallery = _gallery_of_task(name, where)
        if gallery is None:
            others.append(str(name))
            continue
        key = gallery_key(*gallery)
        if key in found:
            raise ValueError(f"two results for {name!r} in the MTEB results given: give one model's results")
        metrics = _checked_scores(scores, where)
        tied[key] = metrics.pop(TIED_QUERIES, 0)
        found[key] = GalleryResult(exact_numbers(metrics, where))
    if not found:
        raise ValueError(_no_rococo_task(results, others))
    ordered = dict(sorted(found.items(), key=lambda item: (GalleryKey.parse(item[0]).attack != CLEAN, item[0])))
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
            raise ValueError(f"{where or 'results'}: `{SCORE_PREFIX}{name}` {value} is no count of {out_of} queries")
        return counted

    names = [*(f"recall@{k}" for k in ks), *(f"clean_recall@{k}" for k in ks), "false_rate"]
    counts = [count(name, total) for name in names]
    clean_hits = count("clean_recall@1", total)
    numbers = percentages(names + ["clean_top1", "attacked"],
                          counts + [clean_hits, count("attack_success_rate", clean_hits)], total, ks)
    return {name: numbers.get(name, value) for name, value in metrics.items()}


def report_from_mteb(results: Any, out=None, *, model_name: Optional[str] = None) -> Report:
    """rococo-eval's report of MTEB's results (:func:`results_from_mteb`): a :class:`~rococo_eval.results.Report` as
    ``evaluate_model`` returns it, written with ``out`` (``report.json``, ``report.md``, ``recall.png``,
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
    report = build_report(gallery_results, meta)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_report(report, Path(out))
    return report


def task_name(attack: str, direction: str) -> str:
    """The MTEB task name of the gallery of ``attack`` in ``direction``, in MTEB's style (the name of the task's
    class, no ``-`` or ``_``, ending in ``Retrieval``); :func:`gallery_of_task_name` is its inverse.

    Example:
        >>> task_name("same_concept", IMAGE_TO_TEXT), task_name("mix_seed7", TEXT_TO_IMAGE)
        ('RoCOCOSameConceptI2TRetrieval', 'RoCOCOMixSeed7T2IRetrieval')
    """
    words = "".join(word.capitalize() for word in attack.split("_"))
    return f"{TASK_PREFIX}{words}{SHORT_DIRECTIONS[direction]}Retrieval"


def gallery_of_task_name(name: str) -> Optional[tuple[str, str]]:
    """``(attack, direction)`` named by a RoCOCO task's name, :func:`task_name`'s or the one earlier versions wrote
    in their results (``RoCOCO-rand_voca-I2T``); None when ``name`` is neither. The gallery is not checked.

    Example:
        >>> gallery_of_task_name("RoCOCOMixSeed1T2IRetrieval"), gallery_of_task_name("RoCOCO-rand_voca-I2T")
        (('mix_seed1', 'text_to_image'), ('rand_voca', 'image_to_text'))
    """
    directions = {short: direction for direction, short in SHORT_DIRECTIONS.items()}
    old = _OLD_TASK_NAME.fullmatch(name)
    if old:
        return old[1], directions[old[2]]
    new = _TASK_NAME.fullmatch(name)
    if not new:
        return None
    attack = "_".join(word.lower() for word in re.findall(r"[A-Z][a-z0-9]*", new[1]))
    return (attack, directions[new[2]]) if task_name(attack, directions[new[2]]) == name else None


def _gallery_of_task(name, where) -> Optional[tuple[str, str]]:
    """``(attack, direction)`` of the gallery a RoCOCO task (:func:`gallery_of_task_name`) scores; None for another
    task's name (one that does not start with :data:`TASK_PREFIX`).

    Raises:
        ValueError: ``name`` is no string, or starts with :data:`TASK_PREFIX` but is no RoCOCO task's name, or is the
            name of a gallery RoCOCO does not have (an unknown attack, or an attack in the other direction:
            :func:`~rococo_eval.catalog.check_direction`).
    """
    if not isinstance(name, str):
        raise ValueError(f"{where}: `task_name` must be a string, got {_shown(name)}")
    if not name.startswith(TASK_PREFIX):
        return None
    gallery = gallery_of_task_name(name)
    if gallery is None:
        raise ValueError(f"{where}: `task_name` {name!r} is no RoCOCO task's name ({_NAMES_WANTED})")
    try:
        return gallery[0], check_direction(*gallery)
    except ValueError as error:
        raise ValueError(f"{where}: `task_name` {name!r} names a gallery RoCOCO does not have: {error}") from None


def _task_scores(results: Any) -> Iterable[tuple[Any, dict, str]]:
    """``(task name, test scores, where)`` of each task result in ``results`` (see :func:`results_from_mteb`):
    ``where`` is the file (or the task) that errors name."""
    if isinstance(results, (str, Path)):
        folder = Path(results)
        if not folder.is_dir():
            raise ValueError(f"MTEB results folder {str(results)!r} "
                             f"{'is a file, not a folder' if folder.exists() else 'does not exist'}")
        paths = sorted(folder.rglob(f"{TASK_PREFIX}*.json"))
        holders = sorted({str(path.parent) for path in paths})
        if len(holders) > 1:
            shown = ", ".join(holders[:3]) + (", ..." if len(holders) > 3 else "")
            raise ValueError(f"MTEB results folder {str(results)!r} holds RoCOCO results in {len(holders)} folders "
                             f"({shown}): give the folder of one model's results")
        for path in paths:
            document = _read_result_file(path)
            yield document.get("task_name"), _test_scores(document.get("scores"), path), str(path)
        return
    task_results = getattr(results, "task_results", results)
    if isinstance(task_results, (bytes, Mapping)) or not isinstance(task_results, Iterable):
        raise ValueError(f"`results` must be a ModelResult, a list of TaskResult or a results folder, got "
                         f"{_shown(results)}")
    for index, task_result in enumerate(task_results):
        name = getattr(task_result, "task_name", None)
        where = name if isinstance(name, str) else f"`results`[{index}]"
        yield name, _test_scores(getattr(task_result, "scores", None), where), where


def _no_rococo_task(results: Any, others: list[str]) -> str:
    """Why ``results`` gave no RoCOCO result: an empty folder, or a folder (or results) of other tasks only
    (``others``: their names).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _no_rococo_task(folder, [])  # doctest: +ELLIPSIS
        "MTEB results folder '...' is empty: ..."
        >>> _ = (folder / "model_meta.json").write_text("{}")
        >>> _no_rococo_task(folder, [])  # doctest: +ELLIPSIS
        "MTEB results folder '...' holds 1 file (model_meta.json) but no result of a RoCOCO task: ..."
    """
    wanted = ("RoCOCO<Attack>I2TRetrieval.json or RoCOCO<Attack>T2IRetrieval.json, under <model>/<revision>/, as "
              "mteb.evaluate writes them with a ResultCache (docs/harness.md)")
    if not isinstance(results, (str, Path)):
        return (f"the MTEB results given hold no RoCOCO task ({_NAMES_WANTED}); "
                f"{'their tasks: ' + ', '.join(others) if others else 'they hold no task'}")
    files = sorted(path.relative_to(results).as_posix() for path in Path(results).rglob("*") if path.is_file())
    if not files:
        return f"MTEB results folder {str(results)!r} is empty: it should hold {wanted}"
    shown = ", ".join(files[:3]) + (f", ... ({len(files) - 3} more)" if len(files) > 3 else "")
    return (f"MTEB results folder {str(results)!r} holds {len(files)} file{'s' if len(files) > 1 else ''} ({shown}) "
            f"but no result of a RoCOCO task: it should hold {wanted}")


def _read_result_file(path: Path) -> dict:
    """One MTEB result file, read within :data:`MAX_RESULTS_FILE_BYTES` and :data:`MAX_RESULTS_JSON_DEPTH`."""
    try:
        if not path.is_file():
            raise ValueError("not a file")
        check_size(path, MAX_RESULTS_FILE_BYTES)
        document = parse_json(path.read_bytes(), "MTEB result", MAX_RESULTS_JSON_DEPTH)
    except (ValueError, OSError) as error:
        reason = error.strerror or str(error) if isinstance(error, OSError) else str(error)
        raise ValueError(f"{path}: {reason.removeprefix(f'{path.name}: ')}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: holds a JSON {type(document).__name__}, not an MTEB result (an object with "
                         "`task_name` and `scores`)")
    return document


def _test_scores(scores, where) -> dict:
    """The scores of a task's one ``test`` result."""
    if not isinstance(scores, Mapping):
        raise ValueError(f"{where}: `scores` must be an object of MTEB's splits, got {_shown(scores)}")
    test = scores.get("test")
    if not isinstance(test, list) or len(test) != 1 or not isinstance(test[0], Mapping):
        found = _shown(test) if "test" in scores else f"the splits {sorted(map(str, scores))}"
        raise ValueError(f"{where}: `scores.test` must be a list of one object (MTEB's result of the test split), "
                         f"got {found}")
    return dict(test[0])


def _checked_scores(scores: Mapping, where) -> dict:
    """RoCOCO's numbers among a task's test ``scores`` (its :data:`SCORE_PREFIX` names), by metric name, checked as
    numbers these tasks can write: every one of them there, percentages from 0 to 100 (the attack success rate is
    NaN when no query had a clean hit), counts from 0 to :data:`MAX_COUNT`, recalls that do not fall as K grows nor
    exceed the clean ones, and a false rate that leaves room for the hits at 1."""
    numbers: dict[str, float] = {}
    for field, value in scores.items():
        if not (isinstance(field, str) and field.startswith(SCORE_PREFIX)):
            continue
        metric = field[len(SCORE_PREFIX):]
        if metric in COUNTS or metric == TIED_QUERIES:
            numbers[metric] = _count(value, where, field)
        elif metric in PERCENTAGES or _RECALL.fullmatch(metric):
            numbers[metric] = _percentage(value, where, field, metric == "attack_success_rate")
        else:
            raise ValueError(f"{where}: `{field}` is none of RoCOCO's numbers: the file was not made by its tasks")
    missing = [name for name in (*COUNTS, "recall@1", "clean_recall@1", *PERCENTAGES) if name not in numbers]
    if missing:
        raise ValueError(f"{where}: no `{SCORE_PREFIX}{missing[0]}` in the test scores: the result was not made by "
                         "RoCOCO's tasks")
    recalls = [_RECALL.fullmatch(metric) for metric in numbers]
    ks = sorted(int(match[2]) for match in recalls if match and not match[1])
    if ks != sorted(int(match[2]) for match in recalls if match and match[1]):
        raise ValueError(f"{where}: `{SCORE_PREFIX}recall@K` and `{SCORE_PREFIX}clean_recall@K` name other Ks")

    def refuse(field: str, reason: str):
        raise ValueError(f"{where}: `{SCORE_PREFIX}{field}` {numbers[field]:g} {reason}")

    for field in ("num_queries", "num_gallery"):
        if numbers[field] == 0:
            refuse(field, "counts nothing: a gallery has queries and items")
    if numbers["num_adversarial"] > numbers["num_gallery"]:
        refuse("num_adversarial", f"is over the gallery's {numbers['num_gallery']} items")
    if numbers.get(TIED_QUERIES, 0) > numbers["num_queries"]:
        refuse(TIED_QUERIES, f"is over the {numbers['num_queries']} queries")
    for prefix in ("", "clean_"):
        for low, high in zip(ks, ks[1:]):
            if numbers[f"{prefix}recall@{high}"] < numbers[f"{prefix}recall@{low}"]:
                refuse(f"{prefix}recall@{high}", f"is below `{SCORE_PREFIX}{prefix}recall@{low}` "
                                                 f"{numbers[f'{prefix}recall@{low}']:g}: a query found at {low} is "
                                                 f"found at {high}")
    for k in ks:
        if numbers[f"recall@{k}"] > numbers[f"clean_recall@{k}"]:
            refuse(f"recall@{k}", f"is over `{SCORE_PREFIX}clean_recall@{k}` {numbers[f'clean_recall@{k}']:g}: a "
                                  "query's rank among the clean items is at most its rank among all")
    if numbers["false_rate"] + numbers["recall@1"] > 100 + 1e-5:
        refuse("false_rate", f"leaves no room for `{SCORE_PREFIX}recall@1` {numbers['recall@1']:g}: a query whose "
                             "first item is adversarial is no hit at 1")
    if math.isnan(numbers["attack_success_rate"]) and numbers["clean_recall@1"] > 0:
        refuse("attack_success_rate", f"with `{SCORE_PREFIX}clean_recall@1` {numbers['clean_recall@1']:g}: it is "
                                      "NaN only when no query had a clean hit")
    return numbers


def _count(value, where, field: str) -> int:
    """``value`` of the score ``field`` as a count of queries or items, checked."""
    integral = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not integral or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{where}: `{field}` must be a count from 0 to {MAX_COUNT:,}, got {_shown(value)}")
    return int(value)


def _percentage(value, where, field: str, may_be_nan: bool) -> float:
    """``value`` of the score ``field`` as a percentage, checked (NaN, or MTEB's null for it, only where allowed)."""
    if may_be_nan and (value is None or isinstance(value, float) and math.isnan(value)):
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise ValueError(f"{where}: `{field}` must be a percentage from 0 to 100, got {_shown(value)}")
    return float(value)


def _shown(value) -> str:
    """``value`` as an error shows it: JSON's null, else a short repr."""
    return "null" if value is None else reprlib.repr(value)


def _model_name(results: Any) -> Optional[str]:
    if isinstance(results, (str, Path)):
        names = {path.parent.parent.name for path in Path(results).rglob(f"{TASK_PREFIX}*.json")}
        return names.pop().replace("__", "/") if len(names) == 1 else None
    return getattr(results, "model_name", None)
