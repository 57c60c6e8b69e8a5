"""RoCOCO's MTEB tasks made ready for MTEB itself: their data written in MTEB's retrieval format (the layout of MTEB's
``push_dataset_to_hub``) and pushed to the Hub, the upstream task file pinned to the revisions pushed, and their
descriptive statistics computed by MTEB's ``calculate_descriptive_statistics()`` into the upstream folder
(:mod:`rococo_eval.harness.mteb_upstream`). ``python rococo_dataset.py mteb-push`` and ``mteb-stats`` run them.

Each task's data is what :func:`~rococo_eval.harness.mteb_tasks.mteb_tasks` reads from an exported RoCOCO dataset:
the ``queries`` (``id``, ``image`` or ``text``), the ``corpus`` (the gallery: clean items ``clean-<row>``, adversarial
ones ``decoy-<row>``, rows in the export's order) and the ``qrels`` (``query-id``, ``corpus-id``, ``score``: every
clean item of the query's image, no adversarial one). The ids are the rows' places, so two runs write the same ids.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import datasets
import yaml

from rococo_eval.data.export import push_to_hub
from rococo_eval.harness.mteb_tasks import RococoRetrieval, mteb_tasks
from rococo_eval.harness.mteb_upstream import STATISTICS_FOLDER, TASK_FILE, UPSTREAM_TASKS

logger = logging.getLogger(__name__)

_SPLIT_FILE = "test-00000-of-00001.parquet"  # the name datasets' push_to_hub gives a one-shard split


def write_statistics(dataset: str, attacks: Union[str, Sequence[str]] = "all", *, folder=STATISTICS_FOLDER,
                     load_kwargs: Optional[Mapping[str, Any]] = None) -> list[Path]:
    """Each task's descriptive statistics, computed by MTEB's ``calculate_descriptive_statistics()`` on ``dataset``
    (an export, as :func:`~rococo_eval.harness.mteb_tasks.mteb_tasks` takes it) and written as MTEB writes them,
    ``<folder>/<task>.json``; returns the files written.

    Example (the files it wrote from RoCOCO's export, kept in the upstream folder):
        >>> sorted(path.name for path in STATISTICS_FOLDER.glob("*.json"))[:3]
        ['RoCOCOCleanI2TRetrieval.json', 'RoCOCOCleanT2IRetrieval.json', 'RoCOCODangerI2TRetrieval.json']
    """
    written = []
    for task in mteb_tasks(dataset, attacks, load_kwargs=load_kwargs):
        task.metadata.statistics_folder = Path(folder)
        task.calculate_descriptive_statistics(overwrite_results=True)
        written.append(task.metadata.descriptive_stat_path)
        logger.info("wrote %s", written[-1])
    return written


def write_mteb_format(task: RococoRetrieval, folder) -> Path:
    """Write one task's queries, corpus and qrels into ``folder`` as MTEB's ``push_dataset_to_hub`` lays them out on
    the Hub: a config per part (``queries``, ``corpus``, ``qrels``), the split ``test`` in
    ``<config>/test-00000-of-00001.parquet``, and a card whose YAML lists them, so that MTEB's standard retrieval
    loader reads the folder (or the Hub repository it is pushed to) with no ``load_data`` of its own. Returns
    ``folder``.
    """
    folder = Path(folder)
    task.load_data()
    split = task.dataset["default"]["test"]
    qrels = datasets.Dataset.from_list([{"query-id": query, "corpus-id": item, "score": score}
                                        for query, items in split["relevant_docs"].items()
                                        for item, score in items.items()])
    parts = {"queries": split["queries"], "corpus": split["corpus"], "qrels": qrels}
    for config, table in parts.items():
        (folder / config).mkdir(parents=True, exist_ok=True)
        table.to_parquet(str(folder / config / _SPLIT_FILE))
    listing = yaml.safe_dump({"configs": [{"config_name": config, "data_files": [
        {"split": "test", "path": f"{config}/{_SPLIT_FILE}"}]} for config in parts]}, sort_keys=False)
    metadata = task.metadata
    (folder / "README.md").write_text(f"---\n{listing}---\n\n# {metadata.name}\n\n{metadata.description}\n\n"
                                      f"```bibtex\n{metadata.bibtex_citation.strip()}\n```\n", encoding="utf-8")
    return folder


def push_tasks(dataset: str, owner: str, out, attacks: Union[str, Sequence[str]] = "all", *,
               token: Optional[str] = None, private: bool = False, endpoint: Optional[str] = None,
               load_kwargs: Optional[Mapping[str, Any]] = None) -> dict[str, dict[str, str]]:
    """Write each task of ``dataset`` in MTEB's format into ``out/<task>`` (:func:`write_mteb_format`) and push it to
    the Hub repository ``<owner>/<task>`` (:func:`~rococo_eval.data.export.push_to_hub`: one commit); returns each
    task's ``{"path", "revision"}`` (the commit), what :func:`pin_revisions` writes into the upstream file.

    Raises:
        ValueError: ``owner`` is empty or holds a ``/``.

    Example:
        >>> push_tasks("rococo-export", "org/RoCOCO", "rococo-mteb")
        Traceback (most recent call last):
        ...
        ValueError: `owner` must be a Hub user or organisation name without '/', got 'org/RoCOCO'
    """
    if not owner or "/" in owner:
        raise ValueError(f"`owner` must be a Hub user or organisation name without '/', got {owner!r}")
    pinned = {}
    for task in mteb_tasks(dataset, attacks, load_kwargs=load_kwargs):
        name = task.metadata.name
        folder = write_mteb_format(task, Path(out) / name)
        commit_url = push_to_hub(folder, f"{owner}/{name}", token=token, private=private, endpoint=endpoint,
                                 commit_message=f"{name} in MTEB's retrieval format (rococo-eval)")
        pinned[name] = {"path": f"{owner}/{name}", "revision": commit_url.rstrip("/").rsplit("/", 1)[-1]}
        logger.info("pushed %s at %s", pinned[name]["path"], pinned[name]["revision"])
    return pinned


def pin_revisions(pinned: Mapping[str, Mapping[str, str]], task_file=TASK_FILE) -> Path:
    """Write each task's Hub repository and revision (as :func:`push_tasks` returns them) into its ``dataset=`` line
    of the upstream file; returns the file.

    Raises:
        ValueError: a task the file does not hold.

    Example:
        >>> pin_revisions({"RoCOCOMixSeed7T2IRetrieval": {"path": "org/RoCOCOMixSeed7T2IRetrieval",
        ...                                              "revision": "main"}})
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `pinned` names 'RoCOCOMixSeed7T2IRetrieval', which is no upstream task (RoCOCOCleanI2T...)
    """
    task_file = Path(task_file)
    text = task_file.read_text()
    for name, dataset in pinned.items():
        if name not in UPSTREAM_TASKS:
            raise ValueError(f"`pinned` names {name!r}, which is no upstream task ({', '.join(UPSTREAM_TASKS)})")
        line = re.compile(r'dataset=\{"path": "[^"]*/' + re.escape(name) + r'", "revision": "[^"]*"\}')
        text = line.sub(f'dataset={{"path": "{dataset["path"]}", "revision": "{dataset["revision"]}"}}', text)
    task_file.write_text(text)
    return task_file
