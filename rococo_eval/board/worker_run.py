"""The worker's evaluation of a downloaded model (:mod:`rococo_eval.board.worker`): the evaluation ``rococo-eval run``
makes, in this process or, on a machine with several GPUs, in a launch of several processes on torch.distributed.

:func:`evaluated_record` loads the model and runs :func:`rococo_eval.evaluation.evaluate_model`, the function
``run`` calls, among the processes of :mod:`rococo_eval.processes` (which share each item set's embedding and
each two-stage model's re-ranking, as they do for ``run``), and makes the result record of rank 0's report: its
summary rows and each gallery's per-query outcomes (the hits, the false rate's ``top1_adversarial`` and the clean
hits), taken from the report in memory, with the images' digest and the device in its ``provenance``.

:func:`launched_record` runs it in ``python -m torch.distributed.run --standalone --nproc-per-node N -m
rococo_eval.board.worker_run SPEC`` (a child of the worker, which keeps its claim meanwhile): each process joins
the process group (NCCL on GPUs, each process on GPU ``LOCAL_RANK``; gloo on CPU), opens the source the spec names
and evaluates its share; rank 0 writes the record beside the spec, whole or not at all, and the worker reads it (then
removes the launch's folder). A process that fails writes its error's one line there too, and the worker's error
names the first one written (:func:`launch_failure`).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

from rococo_eval.board.leaderboard import validity_warnings_of
from rococo_eval.board.records import make_record, per_query_outcomes
from rococo_eval.io.atomic import write_atomic
from rococo_eval.processes import ONE, Processes

logger = logging.getLogger(__name__)


def evaluated_record(request: dict, model: str, source, *, attacks, out, cache_dir, device: Optional[str],
                     batch_size: Optional[int], workers: int, processes: Processes = ONE) -> Optional[dict]:
    """The result record of ``request``'s model, loaded as ``model`` (a ``--model`` name of the downloaded folder),
    evaluated on ``source`` with ``run``'s options (the report written into ``out``); None on a process other than
    rank 0 of ``processes``. Its ``provenance`` holds the images' digest and the device; the worker adds the rest.

    Raises:
        ValueError: a model that does not load or whose embeddings are not finite; or whatever else the run raises.
    """
    from rococo_eval.evaluation import evaluate_model
    from rococo_eval.models.adapters import load_model
    from rococo_eval.processes import rank_device

    model_object = load_model(model, device=rank_device(processes, device), precision=request["precision"])
    options = {} if batch_size is None else {"batch_size": batch_size}
    report = evaluate_model(model_object, source, attacks=attacks, out=out, cache_dir=cache_dir, workers=workers,
                            name=request["model"], processes=processes,
                            meta={"precision": request["precision"], "model_commit": request["commit"]}, **options)
    if report is None:
        return None
    rows = [row.to_dict() for row in report.summary if not row.is_seed_mean]  # the board makes its own means
    outcomes = {key: per_query_outcomes(result.per_query) for key, result in report.results.items()
                if result.per_query}  # as the Space's submissions keep them
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return make_record(rows, outcomes, model=request["model"], link=request["link"], precision=request["precision"],
                       note=f"evaluated by the board: {request['repo']} at {request['commit']}", submitted_at=now,
                       validity_warnings=validity_warnings_of(rows),
                       provenance={"images_digest": images_digest(source, report.meta["attacks"]),
                                   "device": report.meta["device"]})


def images_digest(source, attacks) -> str:
    """The SHA-256 of the fingerprints of the image sets a run of ``attacks`` reads (the clean images and each image
    attack's: names, sizes and alterations, as the embedding cache keys them)."""
    import hashlib

    from rococo_eval.scoring.embeddingsfile import item_sets

    sets = item_sets(source, attacks)
    return hashlib.sha256(json.dumps(sorted((name, items.fingerprint) for name, items in sets.items()
                                            if name.startswith("images/"))).encode()).hexdigest()


def launched_record(processes: int, request: dict, model: str, source_options: dict, folder: Path,
                    stop: Optional[Callable[[], bool]] = None, **options) -> dict:
    """:func:`evaluated_record` in a launch of ``processes`` processes (torchrun, standalone), with the files of the
    launch under ``folder``: the source opened by each process as ``open_source(**source_options)``, ``options``
    those of :func:`evaluated_record`. ``stop`` is asked every second; when it answers True, or the worker is
    interrupted (Ctrl-C; SIGTERM under :func:`~rococo_eval.board.worker.sigterm_as_interrupt`), the launch is ended
    (torchrun ends its processes).

    Raises:
        RuntimeError: the launch failed, naming the first failed process's error (or the launcher's last line), or
            was stopped.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("failed-rank*.txt"):
        stale.unlink()
    record_file = folder / "record.json"
    record_file.unlink(missing_ok=True)
    spec = {"request": request, "model": model, "source": source_options, "record": str(record_file),
            "options": {name: str(value) if isinstance(value, Path) else value for name, value in options.items()},
            "log_level": logging.getLogger("rococo_eval").getEffectiveLevel()}
    spec_file = write_atomic(folder / "spec.json", lambda handle: handle.write(json.dumps(spec).encode()))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               "-m", "rococo_eval.board.worker_run", str(spec_file)]
    logger.info("request %s: evaluating in %d processes (torch.distributed)", request["id"], processes)
    with open(folder / "launch.log", "wb") as log:
        launch = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            while launch.poll() is None:
                if stop is not None and stop():
                    raise RuntimeError(f"the launch of {processes} processes was stopped")
                try:
                    launch.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if launch.poll() is None:  # stopped, or the worker interrupted: torchrun ends its processes
                launch.terminate()
                launch.wait()
    if launch.returncode != 0 or not record_file.is_file():
        raise RuntimeError(f"the launch of {processes} processes failed (exit status {launch.returncode}): "
                           f"{launch_failure(folder)}")
    record = json.loads(record_file.read_bytes())
    shutil.rmtree(folder)  # read: a failed launch's folder stays, with its log
    return record


def launch_failure(folder: Path) -> str:
    """The line that says why the launch whose files are in ``folder`` failed: the error of the process that failed
    first (the others' are mostly the group's end: a peer gone); else, for a process that ended without one (a
    signal: the kernel's out-of-memory killer, say), the rank and exit code of torchrun's root cause; else the last
    line of the launch's log.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "launch.log").write_text("Root Cause (first observed failure):\\n[0]:\\n"
        ...     "  rank      : 1 (local_rank: 1)\\n  exitcode  : -9 (pid: 7)\\n" + "=" * 60 + "\\n")
        >>> launch_failure(folder)
        'rank 1 (local_rank: 1) ended with exit code -9 (pid: 7), no error written (a signal?)'
    """
    failures = sorted(folder.glob("failed-rank*.txt"), key=lambda path: path.stat().st_mtime_ns)
    if failures:
        return failures[0].read_text().strip()
    log = folder / "launch.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    cause = re.search(r"Root Cause.*?^\s*rank\s*:\s*(.+?)\s*$.*?^\s*exitcode\s*:\s*(.+?)\s*$", text,
                      re.DOTALL | re.MULTILINE)
    if cause:
        return f"rank {cause.group(1)} ended with exit code {cause.group(2)}, no error written (a signal?)"
    return (text.strip().splitlines() or ["no output"])[-1]


def main(argv=None) -> int:
    """One process of :func:`launched_record`'s launch: ``python -m rococo_eval.board.worker_run SPEC``."""
    from rococo_eval.data.source import open_source
    from rococo_eval.processes import join

    spec = json.loads(Path((argv or sys.argv[1:])[0]).read_bytes())
    options = spec["options"]
    rank, processes = os.environ.get("RANK", "0"), None
    try:
        processes = join(options["device"])  # its failure too (a GPU taken, the rendezvous) is named
        logging.basicConfig(format=f"rococo-eval worker [{processes.name}]: %(message)s")
        logging.getLogger("rococo_eval").setLevel(spec["log_level"])
        source = processes.main_first(lambda: open_source(**spec["source"]))
        record = evaluated_record(spec["request"], spec["model"], source, processes=processes, **options)
        if record is not None:
            write_atomic(spec["record"], lambda handle: handle.write(json.dumps(record).encode()))
    except Exception as error:
        line = f"{processes.name if processes else f'rank {rank}'}: {type(error).__name__}: " \
               f"{' '.join(str(error).split())}"
        write_atomic(Path(spec["record"]).parent / f"failed-rank{rank}.txt", lambda handle: handle.write(line.encode()))
        raise
    finally:
        if processes is not None:
            processes.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
