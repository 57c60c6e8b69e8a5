"""The board's own rows (issue 44): requests of models from the Hub (rococo_eval.board.requests) and the worker that
evaluates them (rococo_eval.board.worker), against a fake Hub on 127.0.0.1 that serves a real tiny CLIP repository at
two commits, the requests repo and the results repo."""

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers.tiny_models import make_tiny_hf_clip
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.leaderboard import EVALUATED, Leaderboard
from rococo_eval.board.records import read_record
from rococo_eval.board.requests import RequestQueue, make_request, read_request, request_bytes, request_path
from rococo_eval.board.worker import Worker
from rococo_eval.cli import main
from rococo_eval.data.source import open_source

REQUESTS, RESULTS, MODEL = "org/requests", "org/board", "org/tiny-clip"


def model_files(folder, seed: int) -> dict:
    """The files of a tiny transformers CLIP (weights drawn with ``seed``), as a repository holds them."""
    model_dir = make_tiny_hf_clip(folder, seed).removeprefix("hf:")
    return {path.relative_to(model_dir).as_posix(): path.read_bytes()
            for path in sorted(__import__("pathlib").Path(model_dir).rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def commits(tmp_path_factory):
    """The tiny CLIP's files at two commits (seeds 0 and 1)."""
    return [model_files(tmp_path_factory.mktemp(f"seed{seed}"), seed) for seed in (0, 1)]


@pytest.fixture
def hub(fake_hub, commits):
    """The fake Hub holding the tiny CLIP at two commits (the second the head), and empty requests and results
    repos; ``hub.shas`` are the model's commits."""
    fake_hub.shas = [fake_hub.put_model(MODEL, files) for files in commits]
    fake_hub.files[REQUESTS], fake_hub.files[RESULTS] = {}, {}
    return fake_hub


def queue(hub, **options) -> RequestQueue:
    return RequestQueue(REQUESTS, endpoint=hub.url, **options)


def worker(hub, folder, benchmark, **options) -> Worker:
    results = HubRecords(RESULTS, folder / "results", endpoint=hub.url, timeout_s=options.pop("timeout_s", 30))
    return Worker(queue(hub), results, open_source(benchmark=benchmark), folder / "work", device="cpu", **options)


def requests_on(hub) -> dict:
    return {path: json.loads(data) for path, data in hub.files[REQUESTS].items()}


def records_on(hub) -> list[dict]:
    return [read_record(data, None, path) for path, data in hub.files[RESULTS].items()]


def put_request(hub, model=f"hf:{MODEL}", commit=None, **fields) -> dict:
    """A pending request committed elsewhere (a maintainer, or a repository changed since the Space checked it)."""
    request = {**make_request(model, MODEL, "main", commit or hub.shas[1], 1, link="", precision="fp32",
                              requested_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              client=""), **fields}
    hub.files[REQUESTS][request_path(request)] = request_bytes(request)
    return request


def test_a_request_is_evaluated_at_its_commit_and_its_numbers_are_run_s(hub, commits, benchmark, tmp_path, capsys):
    request = queue(hub).submit(f"hf:{MODEL}", hub.shas[0], link="https://x.org/m")
    assert request["commit"] == hub.shas[0] and request["status"] == "pending"
    ended = worker(hub, tmp_path, benchmark).step()
    assert ended["status"] == "done", ended["reason"]
    (record,) = records_on(hub)
    assert record["provenance"]["model_commit"] == hub.shas[0]
    assert set(record["provenance"]["weight_files"]) == {"model.safetensors"}
    assert ended["result"] == next(iter(hub.files[RESULTS]))
    folder = tmp_path / "seed0"
    (folder / "tiny-clip").mkdir(parents=True)
    for name, data in commits[0].items():
        (folder / "tiny-clip" / name).write_bytes(data)
    assert main(["run", "--model", f"hf:{folder / 'tiny-clip'}", "--benchmark", str(benchmark), "--device", "cpu",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "-q"]) == 0
    run = json.loads((tmp_path / "run" / "report.json").read_text())
    for row in run["summary"]:
        if "seeds" in row:
            continue
        mine = record["galleries"][f"{row['attack']}/{row['direction']}"]
        assert (mine["recall@1"], mine["recall@5"], mine["num_queries"]) == (row["recall@1"], row["recall@5"],
                                                                              row["num_queries"])
