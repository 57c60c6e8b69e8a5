"""The board's evaluation worker: it claims a request (:mod:`rococo_eval.board.requests`), evaluates the model it
names at the commit it names, exactly as ``rococo-eval run`` does, and commits the result record, with its provenance,
to the board's dataset repo (``rococo-eval worker``, docs/space.md).

For each request, :meth:`Worker.evaluate`:

1. checks the repository at the request's commit again (:func:`~rococo_eval.board.requests.check_hub_model`: it
   exists, the commit resolves, no code, within the size limit);
2. downloads that commit only (``snapshot_download(revision=commit)``; for a checkpoint file, ``blip:`` or ``vse:``,
   that file and what its loader reads beside it, all from the repository); refuses a ``config.json`` with
   ``auto_map`` (code of the repository: ``trust_remote_code`` is never set); reads every pickle (``.bin``, ``.pt``,
   ``.pth``, ``.ckpt``, ``.pkl``) through the allowlist of :func:`~rococo_eval.models.checkpoints.load_torch_file`
   first (a ``blip:``/``vse:`` checkpoint is read by its family's loader, through its family's allowlist, and
   nothing else opens it), so a file that needs any other type is refused, and nothing of it runs;
3. loads the downloaded folder (or file) as its family's local form (``hf:FOLDER``, ``open_clip:local-dir:FOLDER``,
   ``pcmepp:FOLDER``, ``blip:FILE``, ``vse:FILE``) and runs :func:`rococo_eval.evaluation.evaluate_model`, the
   function ``rococo-eval run`` calls, at the board's default settings, writing the report as ``run`` writes it;
   with ``processes`` > 1, in a launch of that many processes on torch.distributed, as ``torchrun ... rococo-eval
   run`` spans them (:mod:`rococo_eval.board.worker_run`);
4. makes the result record (:func:`rococo_eval.board.records.make_record`) of the report's summary rows and
   per-query outcomes, with its ``provenance``: the request, the repository and commit, the sha256 of every weight
   file, the images' digest (the fingerprints of the image sets, as the embedding cache keys them), the device, the
   precision, the run's wall time, the worker and its number of processes.

The record joins the worker's outbox (:class:`~rococo_eval.board.hub_records.HubRecords`) and is committed; a
results repo that does not answer leaves it there, and the worker commits it before its next claim. The request is
then done (its ``result`` the record's path), or failed with the error's one line; the worker goes on with the next.
An end the requests repo does not take is kept on disk and committed before the next claim. The worker renews its
claim while it evaluates (:mod:`rococo_eval.board.claims`); a worker that dies leaves its claim to expire
(``claim_expiry_s``), and the request is claimed again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from rococo_eval.board.claims import ClaimRenewal, KeptEnds
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.records import content_digest, record_path
from rococo_eval.board.requests import (
    CLAIM_EXPIRY_S,
    DONE,
    FAILED,
    MAX_REPO_BYTES,
    RequestQueue,
    check_hub_model,
    ended_request,
    hub_model,
)
from rococo_eval.board.worker_run import evaluated_record, launched_record
from rococo_eval.io.download import sha256_of

logger = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
WEIGHT_SUFFIXES = (*PICKLE_SUFFIXES, ".safetensors", ".npz", ".h5", ".msgpack", ".onnx")
LOCAL_FORMS = {"hf": "hf:{}", "open_clip": "open_clip:local-dir:{}", "pcmepp": "pcmepp:{}"}
POLL_S = 60


class Worker:
    """Claims requests of ``queue`` and commits their result records through ``results`` (the board's dataset repo),
    evaluating on ``source`` (a :class:`~rococo_eval.data.source.Source`), with its files under ``folder`` (the
    models downloaded, the embedding cache, the reports, the ends not yet committed). ``device``, ``batch_size``,
    ``workers`` and ``attacks`` are ``run``'s; ``claim_expiry_s`` is how old another worker's claim must be to be
    taken over (this worker renews its own every quarter of it while it evaluates: :mod:`rococo_eval.board.claims`).
    With ``processes`` > 1 each model is evaluated in a launch of that many processes on torch.distributed
    (:func:`~rococo_eval.board.worker_run.launched_record`), which open the source as ``open_source(**source_options)``.

    Raises:
        ValueError: ``processes`` > 1 without ``source_options``.
    """

    def __init__(self, queue: RequestQueue, results: HubRecords, source, folder, *, attacks="all",
                 device: Optional[str] = None, batch_size: Optional[int] = None, workers: int = 0,
                 claim_expiry_s: float = CLAIM_EXPIRY_S, max_bytes: int = MAX_REPO_BYTES, name: str = "",
                 processes: int = 1, source_options: Optional[dict] = None):
        if processes > 1 and source_options is None:
            raise ValueError(f"`processes` is {processes} but `source_options` is None: each process of a launch "
                             "opens the source itself, as `open_source(**source_options)`")
        self.queue, self.results, self.source = queue, results, source
        self.folder = Path(folder)
        self.attacks, self.device, self.batch_size, self.workers = attacks, device, batch_size, workers
        self.claim_expiry_s, self.max_bytes = claim_expiry_s, max_bytes
        self.processes, self.source_options = processes, source_options
        self.ends = KeptEnds(self.folder / "ends")
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"

    def run(self, once: bool = False, poll_s: float = POLL_S) -> int:
        """Evaluate requests as they come (``once``: until none is left to claim); return how many were taken (ended,
        or left to another worker that took the claim over: :meth:`process`). A Hub that does not answer is tried
        again after ``poll_s`` seconds (``once``: its error is raised)."""
        ended = 0
        while True:
            try:
                request = self.step()
            except Exception as error:  # the Hub's, a network's: a worker that waits for requests outlives them
                if once:
                    raise
                logger.warning("worker %s: the requests repo %s: %s", self.name, self.queue.repo_id, error)
                request = None
            ended += request is not None
            if request is None:
                if once:
                    return ended
                time.sleep(poll_s)

    def step(self) -> Optional[dict]:
        """Commit the records of the outbox and the kept ends, claim one request and evaluate it; return it as this
        worker left it (:meth:`process`), or None when there was nothing to claim."""
        if self.results.pending():
            self.results.commit_outbox()
        self.ends.commit(self.queue)
        request = self.queue.claim(self.name, self.claim_expiry_s)
        return None if request is None else self.process(request)

    def process(self, request: dict) -> dict:
        """Evaluate the claimed ``request``, renewing its claim meanwhile, and end it: done with its result record's
        path, or failed with the error's one line; return it as ended. Its end is kept (:class:`KeptEnds`) until the
        requests repo takes it. A claim another worker took over meanwhile is left to it: no result, no end (a launch
        of several processes is stopped when the renewal finds so), and the request is returned as this worker last
        held it."""
        logger.info("worker %s: evaluating %s at %s (request %s)", self.name, request["model"],
                    request["commit"][:12], request["id"])
        with ClaimRenewal(self.queue, request, self.claim_expiry_s / 4) as claim:
            try:
                record, reason = self.evaluate(request, stop=lambda: claim.lost), ""
            except Exception as error:  # any failure of the model, its files or the run ends the request, not it
                record, reason = None, f"{type(error).__name__}: {' '.join(str(error).split())}"
        if not claim.held():
            return claim.request
        if record is None:
            logger.warning("worker %s: request %s failed: %s", self.name, request["id"], reason)
            return self._end(ended_request(claim.request, FAILED, reason))
        self.results.add_to_outbox(record)
        landed = self.results.commit_outbox()
        note = "" if landed else "its result record waits in the worker's outbox: the results repo did not answer"
        return self._end(ended_request(claim.request, DONE, note, result=record_path(record)))

    def _end(self, ended: dict) -> dict:
        """Keep ``ended``, then commit the kept ends; return it."""
        self.ends.keep(ended)
        self.ends.commit(self.queue)
        return ended

    def evaluate(self, request: dict, stop: Optional[Callable[[], bool]] = None) -> dict:
        """The result record of ``request`` (the steps of the module's docstring). A launch of several processes ends
        when ``stop()`` answers True (asked every second; :func:`~rococo_eval.board.worker_run.launched_record`); an
        evaluation in this process runs to its end.

        Raises:
            ValueError: the repository at the commit (:func:`check_hub_model`), code in it, a pickle outside the
                allowlist, a model that does not load or whose embeddings are not finite; or whatever else the run
                raises.
        """
        started = time.monotonic()
        family, location = hub_model(request["model"])
        repo = location.repo
        check_hub_model(request["model"], request["commit"], self.queue.api, self.max_bytes)
        model, weights = self.download(request, family, location)
        options = {"attacks": self.attacks, "out": self.folder / "reports" / request["id"],
                   "cache_dir": self.folder / "cache", "device": self.device, "batch_size": self.batch_size,
                   "workers": self.workers}
        if self.processes > 1:
            record = launched_record(self.processes, request, model, self.source_options,
                                     self.folder / "launches" / request["id"], stop, **options)
        else:
            record = evaluated_record(request, model, self.source, **options)
        provenance = {"request_id": request["id"], "model_repo": repo, "model_commit": request["commit"],
                      "revision_requested": request["revision"], "weight_files": weights, **record["provenance"],
                      "precision": request["precision"], "wall_time_s": round(time.monotonic() - started, 3),
                      "worker": self.name, "processes": self.processes, "results_repo": self.results.repo_id}
        record = {**record, "provenance": provenance}
        return {**record, "digest": content_digest(record)}

    def download(self, request: dict, family: str, location) -> tuple[str, dict[str, str]]:
        """Download the model of ``request`` (``location``, :func:`~rococo_eval.board.requests.hub_model`) at its
        commit only, checked (:func:`check_model_files`); return the local ``--model`` name that loads it and
        ``{path: sha256}`` of its weight files. A repository is downloaded whole; a checkpoint file
        (``blip:hf-hub:ORG/REPO/PATH.pth``) with what its loader reads beside it, all from the commit
        (:func:`~rococo_eval.models.hub_files.download_hub_file`)."""
        from huggingface_hub import snapshot_download

        from rococo_eval.models.hub_files import download_hub_file

        what = f"`model` {request['model']!r} at {request['commit'][:12]}"
        hub = {"cache_dir": self.folder / "models", "endpoint": self.queue.api.endpoint, "token": self.queue.api.token}
        if location.path is None:
            folder = Path(snapshot_download(location.repo, revision=request["commit"], **hub))
            return LOCAL_FORMS[family].format(folder), check_model_files(folder, what)
        folder, read = download_hub_file(location, what, revision=request["commit"], own_files_only=True, **hub)
        return f"{family}:{folder / location.path}", check_model_files(folder, what, read, (location.path,))


def check_model_files(folder: Path, what: str, files=None, read_by_loader=()) -> dict[str, str]:
    """Check a downloaded model folder before its library reads it; return ``{path: sha256}`` of its weight files.
    ``files`` are the paths checked (default every file of ``folder``); ``read_by_loader`` are pickles that the
    family's own loader reads through its allowlist (``blip:``, ``vse:``), hashed here, not read twice.

    Raises:
        ValueError: a ``config.json`` with ``auto_map`` (code of the repository), or a pickle that needs a type
            outside the allowlist (:func:`~rococo_eval.models.checkpoints.load_torch_file`: nothing of it runs).
    """
    from rococo_eval.models.checkpoints import (
        MAX_MODEL_CONFIG_DEPTH,
        MAX_SETTINGS_BYTES,
        load_torch_file,
        read_json_file,
    )

    config = folder / "config.json"
    if config.is_file() and "auto_map" in (read_json_file(config, what, MAX_SETTINGS_BYTES,
                                                          MAX_MODEL_CONFIG_DEPTH) or {}):
        raise ValueError(f"{what}: its config.json names code of the repository (auto_map), which only "
                         "trust_remote_code would run: the board runs no code from a repository")
    weights = {}
    for path in sorted(folder.rglob("*")) if files is None else [folder / name for name in files]:
        name = path.relative_to(folder).as_posix()
        if path.is_file() and (path.name.endswith(WEIGHT_SUFFIXES) or name in read_by_loader):
            if path.name.endswith(PICKLE_SUFFIXES) and name not in read_by_loader:
                load_torch_file(path, f"{what}: {name}")
            weights[name] = sha256_of(path)
    return weights


def add_arguments(parser) -> None:
    """The options of ``rococo-eval worker``."""
    parser.add_argument("--requests-repo", required=True, metavar="ORG/NAME",
                        help="the dataset repo of the requests (the Space's $ROCOCO_REQUESTS_REPO)")
    parser.add_argument("--results-repo", required=True, metavar="ORG/NAME",
                        help="the board's dataset repo, where the result records go (the Space's "
                             "$ROCOCO_LEADERBOARD_REPO)")
    parser.add_argument("--once", action="store_true", help="evaluate the requests there are, then stop (default: "
                                                            "wait for more, checking every --poll seconds)")
    parser.add_argument("--poll", type=float, default=POLL_S, metavar="SECONDS",
                        help=f"seconds between looks at the queue when it is empty (default {POLL_S})")
    parser.add_argument("--claim-expiry", type=float, default=CLAIM_EXPIRY_S, metavar="SECONDS",
                        help="how old another worker's claim must be to be taken over: that worker is taken to have "
                             f"died (default {CLAIM_EXPIRY_S}; a worker renews its own every quarter of it while "
                             "it evaluates)")
    parser.add_argument("--work-dir", default="rococo-worker",
                        help="the worker's folder: models downloaded, embeddings, reports, the outbox of records "
                             "and the ends not yet committed (default ./rococo-worker)")
    parser.add_argument("--images-dir", help="COCO root holding val2014/ (or a benchmark's images)")
    parser.add_argument("--annotations-dir", help="folder of the official annotation files (default "
                                                  "$ROCOCO_ANNOTATIONS_DIR, else the pinned download)")
    parser.add_argument("--benchmark", help="a benchmark folder made by `rococo-eval attack`, instead of RoCOCO")
    parser.add_argument("--attacks", default="all", help="the attacks evaluated (default all, as the board requires)")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--batch-size", type=int, help="items per forward pass (default run's)")
    parser.add_argument("--workers", type=int, default=0, help="threads loading images ahead of the model")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="processes evaluating each model together on torch.distributed, one per GPU, as "
                             "`torchrun --nproc-per-node N ... run` (default: the GPUs visible when there are "
                             "several and --device is cuda or not given, else 1)")
    parser.add_argument("--max-bytes", type=int, default=MAX_REPO_BYTES,
                        help=f"the largest repository evaluated, all its files together (default {MAX_REPO_BYTES})")


def worker_command(args) -> int:
    """``rococo-eval worker``: evaluate the board's requests (the token is $HF_TOKEN, the Hub $HF_ENDPOINT)."""
    from rococo_eval.data.source import open_source

    if not (args.benchmark or args.images_dir):
        raise ValueError("the worker evaluates on RoCOCO's images: pass --images-dir COCO_ROOT (or --benchmark)")
    processes = default_processes(args.device) if args.nproc_per_node is None else args.nproc_per_node
    check_processes(processes, args.device)
    source_options = {"annotations_dir": args.annotations_dir, "benchmark": args.benchmark,
                      "images_dir": args.images_dir and str(Path(args.images_dir).expanduser())}
    source = open_source(**source_options)
    folder = Path(args.work_dir).expanduser()
    queue = RequestQueue(args.requests_repo, max_bytes=args.max_bytes)
    results = HubRecords(args.results_repo, folder / "results", endpoint=queue.api.endpoint)
    worker = Worker(queue, results, source, folder, attacks=args.attacks, device=args.device,
                    batch_size=args.batch_size, workers=args.workers, claim_expiry_s=args.claim_expiry,
                    max_bytes=args.max_bytes, processes=processes, source_options=source_options)
    with sigterm_as_interrupt():
        ended = worker.run(once=args.once, poll_s=args.poll)
    logger.info("worker %s: %d request(s) ended", worker.name, ended)
    return ended


def default_processes(device: Optional[str]) -> int:
    """How many processes evaluate each model by default: one per visible GPU where there are several and ``device``
    is ``cuda`` or None (a named GPU, ``cuda:1``, is one), else one.

    Example:
        >>> default_processes("cpu")
        1
    """
    import torch

    if device not in (None, "cuda"):
        return 1
    return max(1, torch.cuda.device_count())


def check_processes(processes: int, device: Optional[str]) -> None:
    """Check ``--nproc-per-node`` against ``--device`` before any request is claimed: a launch on CUDA takes one GPU
    per process (GPU ``LOCAL_RANK``), so more processes than visible GPUs, or several on one named GPU, would fail
    every request. On the CPU (gloo) any number runs.

    Raises:
        ValueError: ``processes`` < 1, or more than the GPUs a CUDA launch can take.

    Example:
        >>> check_processes(2, "cpu")
    """
    import torch

    if processes < 1:
        raise ValueError(f"--nproc-per-node must be at least 1, got {processes}")
    if processes == 1 or not (str(device).startswith("cuda") or device is None and torch.cuda.is_available()):
        return
    visible = torch.cuda.device_count() if device in (None, "cuda") else 1
    if processes > visible:
        raise ValueError(f"--nproc-per-node {processes} asks for one GPU per process, but --device {device or 'cuda'} "
                         f"gives {visible} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                         f"pass --nproc-per-node {max(visible, 1)} or fewer, or --device cpu")


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, SIGTERM (``kill``, a scheduler ending the job) interrupts the main thread as Ctrl-C does,
    so that its ``finally`` blocks run (a launch's torchrun is ended with its processes); the signal's handler is
    restored after. Outside the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
