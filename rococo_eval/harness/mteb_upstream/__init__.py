"""RoCOCO's tasks in MTEB's own form, the files a pull request to MTEB adds (docs/mteb.md), kept here as the one
source of them: :mod:`rococo_eval.harness.mteb_tasks` builds its tasks on their metadata.

- ``rococo_retrieval.py``: one module-level ``AbsTaskRetrieval`` class per RoCOCO gallery, static ``TaskMetadata``,
  and RoCOCO's false rate as a task-specific score (MTEB's public hook); it imports only ``mteb`` and goes to
  MTEB's ``mteb/tasks/retrieval/eng/`` as it is.
- ``descriptive_stats/Image/Any2AnyRetrieval/<task>.json``: each task's statistics as MTEB's
  ``calculate_descriptive_statistics()`` writes them (:func:`~rococo_eval.harness.mteb_upload.write_statistics`),
  in MTEB's folder layout: they go to ``mteb/descriptive_stats/`` as they are.
- :data:`KNOWN_ISSUES`: the entries the pull request would add to ``KNOWN_ISSUES`` of MTEB's
  ``tests/test_tasks/test_task_quality.py`` (none is needed).
"""

from __future__ import annotations

from pathlib import Path

from mteb.abstasks.retrieval import AbsTaskRetrieval

from rococo_eval.harness.mteb_upstream import rococo_retrieval

FOLDER = Path(__file__).parent
TASK_FILE = FOLDER / "rococo_retrieval.py"
STATISTICS_FOLDER = FOLDER / "descriptive_stats" / "Image" / "Any2AnyRetrieval"
UPSTREAM_TASKS: dict[str, type[AbsTaskRetrieval]] = {
    task.metadata.name: task for task in vars(rococo_retrieval).values()
    if isinstance(task, type) and issubclass(task, AbsTaskRetrieval) and "metadata" in vars(task)}
"""The upstream task classes by task name (``RoCOCORandVocaI2TRetrieval``, the class name), in the file's order."""

KNOWN_ISSUES: dict[str, list[str]] = {}
"""The checks of MTEB's quality test that flag RoCOCO's tasks, with the tasks they flag: none. RoCOCO's duplicates
are real (COCO repeats 173 of its 25,010 test captions; 364 of danger's 50,010 gallery captions are repeats) but stay
under the test's tolerance of 1% (docs/mteb.md)."""
