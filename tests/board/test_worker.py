"""The board's own rows (issue 44): requests of models from the Hub (rococo_eval.board.requests) and the worker that
evaluates them (rococo_eval.board.worker), against a fake Hub on 127.0.0.1 that serves a real tiny CLIP repository at
two commits, the requests repo and the results repo."""

import datetime
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.tiny_models import make_tiny_hf_clip, make_tiny_open_clip_folder, torchvision_stand_in
from rococo_eval.board.claims import ClaimRenewal, KeptEnds
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.leaderboard import EVALUATED
from rococo_eval.board.records import SUMMARY_NUMBERS, outcomes_of, read_record
from rococo_eval.board.requests import (
    RequestQueue,
    ended_request,
    make_request,
    read_request,
    request_bytes,
    request_path,
)
from rococo_eval.board.worker import Worker, check_processes, sigterm_as_interrupt
from rococo_eval.board.worker_run import launch_failure, launched_record
from rococo_eval.cli import main
from rococo_eval.data.source import open_source
from rococo_eval.reporting.compare import report_outcomes
from rococo_eval.results import Report
from rococo_eval.space.hub_requests import HubRequests

REQUESTS, RESULTS, MODEL = "org/requests", "org/board", "org/tiny-clip"


def model_files(folder, seed: int) -> dict:
    """The files of a tiny transformers CLIP (weights drawn with ``seed``), as a repository holds them."""
    model_dir = Path(make_tiny_hf_clip(folder, seed).removeprefix("hf:"))
    return {path.relative_to(model_dir).as_posix(): path.read_bytes() for path in sorted(model_dir.rglob("*"))
            if path.is_file()}


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
    return {path: read_request(data, path) for path, data in hub.files[REQUESTS].items()}


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
    ended = worker(hub, tmp_path, benchmark, attacks="rand_voca,mix_seed1").step()
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
                 "--attacks", "rand_voca,mix_seed1",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "-q"]) == 0
    run = json.loads((tmp_path / "run" / "report.json").read_text())
    rows = [row for row in run["summary"] if "seeds" not in row]  # the seed means: the board makes its own
    assert sorted(record["galleries"]) == sorted(f"{row['attack']}/{row['direction']}" for row in rows)
    for row in rows:
        mine = record["galleries"][f"{row['attack']}/{row['direction']}"]
        assert {name: mine[name] for name in SUMMARY_NUMBERS if name in mine} == {
            name: row[name] for name in SUMMARY_NUMBERS if name in mine}
        assert (mine["num_queries"], mine["num_gallery"]) == (row["num_queries"], row["num_gallery"])
    run_outcomes = report_outcomes(tmp_path / "run", Report.from_json(run))
    for key, outcomes in outcomes_of(record).items():
        assert outcomes["hit"].tolist() == run_outcomes[key]["hit"].tolist()
    # every outcome a record keeps, as the Space's submissions keep them: the false rate's bits too
    assert set(outcomes_of(record)["rand_voca/image_to_text"]) == {"hit", "top1_adversarial", "clean_hit"}


@pytest.mark.slow
def test_two_processes_on_torch_distributed_give_the_record_of_one(hub, benchmark, tmp_path):
    """A worker of two processes (torchrun, gloo on CPU) and a worker of one, each on its own request of the same
    model: the same numbers and per-query bits in every gallery, the same images and device."""
    for number, name in enumerate(("one", "two")):
        put_request(hub, commit=hub.shas[0], link=name, requested_at=f"2026-01-01T00:00:0{number}+00:00")
    one = worker(hub, tmp_path / "one", benchmark, attacks="rand_voca")
    two = worker(hub, tmp_path / "two", benchmark, attacks="rand_voca", processes=2,
                 source_options={"benchmark": str(benchmark)})
    assert [one.step()["link"], two.step()["link"]] == ["one", "two"]
    assert one.results.wait(60) and two.results.wait(60)  # each record is committed in the background
    records = {record["link"]: record for record in records_on(hub)}
    assert records["one"]["galleries"] == records["two"]["galleries"]
    assert set(records["one"]["galleries"]["rand_voca/image_to_text"]["outcomes"]) == {"hit", "top1_adversarial",
                                                                                       "clean_hit"}
    provenance = [records[name]["provenance"] for name in ("one", "two")]
    assert [(found["images_digest"], found["device"], found["processes"]) for found in provenance] == [
        (provenance[0]["images_digest"], "cpu", 1), (provenance[0]["images_digest"], "cpu", 2)]
    assert {request["status"] for request in requests_on(hub).values()} == {"done"}
    assert not (tmp_path / "two" / "work" / "launches").exists() or not any(
        (tmp_path / "two" / "work" / "launches").iterdir())  # the spec, record and log removed once read


@pytest.mark.slow
def test_a_launch_whose_claim_is_lost_is_stopped_with_its_processes(benchmark, tmp_path):
    """The launch of two processes ends, with every process of it, once ``stop`` answers True (the worker's renewal
    found its claim taken over): here, as soon as torchrun and both its processes run."""
    request = make_request("hf:org/tiny-clip", MODEL, "main", "a" * 40, 1, link="", precision="fp32",
                           requested_at="", client="")
    spec = str(tmp_path / "spec.json")
    with pytest.raises(RuntimeError, match="the launch of 2 processes was stopped"):
        launched_record(2, request, "hf:/nowhere", {"benchmark": str(benchmark)}, tmp_path,
                        stop=lambda: len(processes_naming(spec)) == 3, attacks="rand_voca", out=tmp_path / "out",
                        cache_dir=tmp_path / "cache", device="cpu", batch_size=None, workers=0)
    assert processes_naming(spec) == []


def test_an_interrupted_launch_ends_with_its_processes(benchmark, tmp_path):
    """Ctrl-C while a launch runs (or SIGTERM: :func:`sigterm_as_interrupt`): torchrun is ended, and its processes
    with it, before the interruption goes on."""
    request = make_request("hf:org/tiny-clip", MODEL, "main", "a" * 40, 1, link="", precision="fp32",
                           requested_at="", client="")
    spec = str(tmp_path / "spec.json")

    def interrupt() -> bool:
        if processes_naming(spec):
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        launched_record(2, request, "hf:/nowhere", {"benchmark": str(benchmark)}, tmp_path, stop=interrupt,
                        attacks="rand_voca", out=tmp_path / "out", cache_dir=tmp_path / "cache", device="cpu",
                        batch_size=None, workers=0)
    assert processes_naming(spec) == []


def test_sigterm_stops_the_worker_as_ctrl_c_does():
    """A worker stopped with SIGTERM (kill, a scheduler's end of job) leaves as after Ctrl-C, through its ``finally``
    blocks (a launch's torchrun ended: the test above); the signal's handler is restored after."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before


def test_more_processes_than_visible_gpus_is_refused_before_any_request(benchmark, capsys):
    """``--nproc-per-node`` on CUDA beyond the GPUs visible (none here) would fail every request it claims: refused
    at the start, naming the argument and its value; on the CPU (gloo) any number runs."""
    assert main(["worker", "--requests-repo", REQUESTS, "--results-repo", RESULTS, "--benchmark", str(benchmark),
                 "--device", "cuda", "--nproc-per-node", "2", "--once"]) == 1
    assert "--nproc-per-node 2" in capsys.readouterr().err
    assert check_processes(3, "cpu") is None


@pytest.mark.slow
def test_a_launch_whose_processes_fail_raises_one_line_naming_the_process(benchmark, tmp_path):
    """Both processes of a launch fail to load the model: the error is one line, naming a process and its error;
    the launch's files stay for the reader."""
    request = make_request("hf:org/tiny-clip", MODEL, "main", "a" * 40, 1, link="", precision="fp32",
                           requested_at="", client="")
    with pytest.raises(RuntimeError) as raised:
        launched_record(2, request, f"hf:{tmp_path / 'nowhere'}", {"benchmark": str(benchmark)}, tmp_path,
                        attacks="rand_voca", out=tmp_path / "out", cache_dir=tmp_path / "cache", device="cpu",
                        batch_size=None, workers=0)
    assert re.fullmatch(r"the launch of 2 processes failed \(exit status 1\): rank [01] of 2: \w+: .*nowhere.*",
                        str(raised.value)), raised.value
    assert (tmp_path / "launch.log").is_file() and (tmp_path / "spec.json").is_file()


def test_a_failed_launch_is_named_by_the_process_that_failed_first(tmp_path):
    """Rank 1 fails (its GPU's memory, say); rank 0 fails after it, in a collective whose peer is gone: the request's
    line is rank 1's."""
    first, then = tmp_path / "failed-rank1.txt", tmp_path / "failed-rank0.txt"
    first.write_text("rank 1 of 2: OutOfMemoryError: CUDA out of memory")
    then.write_text("rank 0 of 2: RuntimeError: Connection closed by peer")
    os.utime(first, ns=(1, 1))
    assert launch_failure(tmp_path) == "rank 1 of 2: OutOfMemoryError: CUDA out of memory"


def processes_naming(text: str) -> list[str]:
    """The ids of the running processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:  # ended meanwhile
            pass
    return found


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    """A repository holding only a pickle whose unpickling would create the file ``ran`` beside it: the global it
    needs (``eval``) is on no allowlist."""
    folder = tmp_path_factory.mktemp("hostile")
    marker = folder / "ran"

    class Payload:
        def __reduce__(self):
            return eval, (f"open({str(marker)!r}, 'w').close()",)

    torch.save({"weight": torch.zeros(2), "hook": Payload()}, folder / "pytorch_model.bin")
    return {"pytorch_model.bin": (folder / "pytorch_model.bin").read_bytes()}, marker


def not_finite(files: dict) -> dict:
    """The tiny CLIP's files with its image projection all NaN: every image embedding is not finite."""
    from safetensors.torch import load, save

    state = load(files["model.safetensors"])
    state["visual_projection.weight"] = torch.full_like(state["visual_projection.weight"], float("nan"))
    return {**files, "model.safetensors": save(state, metadata={"format": "pt"})}


def test_each_bad_request_fails_with_one_line_and_the_worker_goes_on(hub, commits, hostile_files, benchmark,
                                                                     tmp_path):
    """A repository that does not exist, a revision that does not resolve, a repository over the size limit, a model
    that fails to load, one whose embeddings are not finite, one holding only a pickle that needs a type outside the
    allowlist (nothing of it runs), and one whose config names code of the repository: each request ends failed with
    its one line; the good request after them is done."""
    size = sum(len(data) for data in commits[1].values())
    hub.put_model("org/big", {**commits[1], "extra.safetensors": b"\0" * size})
    hub.put_model("org/broken", {**commits[1], "config.json": b"{not json"})
    hub.put_model("org/nan", not_finite(commits[1]))
    hub.put_model("org/hostile", hostile_files[0])
    config = {**json.loads(commits[1]["config.json"]), "auto_map": {"AutoModel": "modeling_mine.MyModel"}}
    hub.put_model("org/remote-code", {**commits[1], "config.json": json.dumps(config).encode()})
    bad = {"hf:org/missing": "the Hub has no model repository org/missing",
           f"hf:{MODEL}": f"`revision` '{'f' * 40}' of {MODEL} does not resolve",
           "hf:org/big": f"holds {2 * size:,} bytes",
           "hf:org/broken": "config.json",
           "hf:org/nan": "non-finite embeddings",
           "hf:org/hostile": "pytorch_model.bin needs eval to be read, which is not on the allowlist",
           "hf:org/remote-code": "its config.json names code of the repository (auto_map)"}
    for number, model in enumerate(bad):
        repo = model.removeprefix("hf:")
        commit = "f" * 40 if model == f"hf:{MODEL}" else hub.head("models", repo) if repo != "org/missing" else "e" * 40
        put_request(hub, model, commit, repo=repo, requested_at=f"2026-01-01T00:00:0{number}+00:00")
    put_request(hub, requested_at="2026-01-01T00:01:00+00:00")
    ended = worker(hub, tmp_path, benchmark, attacks="rand_voca", max_bytes=size + 1024).run(once=True)
    assert ended == len(bad) + 1
    states = {request["model"] if request["status"] == "failed" else "good": request
              for request in requests_on(hub).values()}
    for model, reason in bad.items():
        assert states[model]["status"] == "failed" and reason in states[model]["reason"], states[model]
        assert "\n" not in states[model]["reason"]
    assert states["good"]["status"] == "done" and len(records_on(hub)) == 1
    assert not hostile_files[1].exists()


def test_an_open_clip_repository_is_evaluated_from_the_hub(hub, benchmark, tmp_path):
    """``open_clip:hf-hub:ORG/REPO``: the worker downloads the repository's commit and loads it as open_clip's
    ``local-dir:``; its pickled weights pass the allowlist (tensors only)."""
    with torchvision_stand_in():
        folder = tmp_path / "tiny-open-clip"
        make_tiny_open_clip_folder(folder)
        commit = hub.put_model("org/tiny-open-clip", {path.name: path.read_bytes() for path in folder.iterdir()})
        request = put_request(hub, "open_clip:hf-hub:org/tiny-open-clip", commit, repo="org/tiny-open-clip")
        ended = worker(hub, tmp_path, benchmark, attacks="rand_voca").step()
    assert ended["id"] == request["id"] and ended["status"] == "done", ended["reason"]
    (record,) = records_on(hub)
    assert record["model"] == "open_clip:hf-hub:org/tiny-open-clip"
    assert list(record["provenance"]["weight_files"]) == ["open_clip_pytorch_model.bin"]


def test_a_claim_on_a_head_that_moved_is_refused_by_the_hub_and_the_request_read_again(hub):
    """Two workers read the same head; the second claims first. The first's claim names the head it read as its
    parent commit, which the Hub refuses (412); reading again, it finds the request running, and claims nothing."""
    request = put_request(hub)
    first, second = queue(hub), queue(hub)
    head, [seen] = first.requests()
    assert second.claim("second")["claimed_by"] == "second"
    assert not first._commit({**seen, "status": "running", "claimed_by": "first"}, "claim", parent=head)
    assert first.claim("first") is None
    assert json.loads(hub.files[REQUESTS][request_path(request)])["claimed_by"] == "second"


def test_the_worker_evaluates_the_commit_it_claimed_when_the_request_is_edited_after(hub, benchmark, tmp_path):
    request = put_request(hub, commit=hub.shas[0])
    mine = worker(hub, tmp_path, benchmark, attacks="rand_voca")
    claimed = mine.queue.claim(mine.name)
    assert claimed["id"] == request["id"] and claimed["status"] == "running"
    edited = {**json.loads(hub.files[REQUESTS][request_path(request)]), "commit": hub.shas[1]}
    hub.files[REQUESTS][request_path(request)] = request_bytes(edited)  # another commit, made elsewhere
    assert mine.process(claimed)["status"] == "done"
    (record,) = records_on(hub)
    assert record["provenance"]["model_commit"] == hub.shas[0]


def test_a_result_the_results_repo_cannot_take_is_kept_and_committed_later(hub, benchmark, tmp_path):
    put_request(hub)
    hub.unreachable.add(RESULTS)
    mine = worker(hub, tmp_path, benchmark, attacks="rand_voca", timeout_s=3)
    ended = mine.step()
    assert ended["status"] == "done" and "waits in the worker's outbox" in ended["reason"]
    assert len(mine.results.pending()) == 1 and hub.files[RESULTS] == {}
    hub.unreachable.clear()
    assert mine.step() is None  # nothing to claim; the outbox is committed first
    assert mine.results.pending() == [] and [record["provenance"]["request_id"] for record in records_on(hub)] == [
        ended["id"]]


def test_a_renewed_claim_outlives_its_expiry_and_one_taken_over_is_left_to_its_new_worker(hub, benchmark, tmp_path,
                                                                                           caplog):
    """A claim of an hour ago, with a minute's expiry, renewed by its worker's heartbeat: not claimable by a second
    worker. Renewal stopped, it expires and the second worker claims it; the first worker's heartbeat finds the claim
    lost, and its worker commits neither a result nor an end."""
    request = put_request(hub, "hf:org/missing", "e" * 40, repo="org/missing")  # fails at once: no evaluation
    first, second = worker(hub, tmp_path / "a", benchmark, name="a", claim_expiry_s=60), queue(hub)
    now = datetime.datetime.now(datetime.timezone.utc)
    claimed = first.queue.claim("a", 60, now=now - datetime.timedelta(hours=1))
    with ClaimRenewal(first.queue, claimed, every_s=0.05) as renewal:
        while requests_on(hub)[request_path(request)]["claimed_at"] == claimed["claimed_at"]:
            time.sleep(0.05)
        assert second.claim("b", 60) is None
    assert not renewal.lost and renewal.held()
    assert second.claim("b", 60, now=now + datetime.timedelta(seconds=30)) is None
    assert second.claim("b", 60, now=now + datetime.timedelta(seconds=90))["claimed_by"] == "b"
    with ClaimRenewal(first.queue, renewal.request, every_s=0.05) as lost:
        while not lost.lost:
            time.sleep(0.05)
    caplog.set_level(logging.WARNING, logger="rococo_eval")
    assert first.process(renewal.request) == renewal.request
    assert "was claimed by another worker" in caplog.text
    now_held = requests_on(hub)[request_path(request)]
    assert (now_held["status"], now_held["claimed_by"], records_on(hub), first.ends.pending()) == (
        "running", "b", [], [])


def test_a_renewal_whose_answer_was_lost_leaves_the_claim_held(hub):
    """A renewal that landed but whose answer never came back (the network): the worker still holds the older stamp.
    Its next renewal, and its end, find the claim still its own (its worker, its attempt), not taken over."""
    put_request(hub)
    mine = queue(hub)
    claimed = mine.claim("a")
    landed = {**claimed, "claimed_at": "2099-01-01T00:00:00+00:00"}
    hub.files[REQUESTS][request_path(claimed)] = request_bytes(landed)
    renewed = mine.renew(claimed)
    assert renewed is not None and requests_on(hub)[request_path(claimed)] == renewed
    assert mine.finish(claimed, "failed", "a reason")["status"] == "failed"


def test_an_end_the_requests_repo_cannot_take_is_kept_and_committed_later(hub, benchmark, tmp_path):
    request = put_request(hub, "hf:org/missing", "e" * 40, repo="org/missing")
    mine = worker(hub, tmp_path, benchmark)
    claimed = mine.queue.claim(mine.name)
    hub.unreachable.add(REQUESTS)
    ended = mine.process(claimed)
    assert ended["status"] == "failed" and "org/missing" in ended["reason"]
    assert mine.ends.pending() == [request["id"]]
    hub.unreachable.clear()
    assert requests_on(hub)[request_path(request)]["status"] == "running"
    assert mine.step() is None  # the kept end first; then nothing to claim
    assert mine.ends.pending() == [] and requests_on(hub)[request_path(request)] == ended


def test_a_kept_end_is_dropped_once_another_worker_holds_the_request(hub, tmp_path, caplog):
    """An end kept while the requests repo did not answer, whose claim expired meanwhile and was taken over: at the
    next try it is dropped (logged), and the request stays the other worker's."""
    request = put_request(hub)
    first = queue(hub)
    claimed = first.claim("a", 60, now=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1))
    ends = KeptEnds(tmp_path)
    ends.keep(ended_request(claimed, "done", result="results/x.json"))
    assert queue(hub).claim("b", 60)["claimed_by"] == "b"
    caplog.set_level(logging.WARNING, logger="rococo_eval")
    assert ends.commit(first) and ends.pending() == [] and "is dropped" in caplog.text
    held = requests_on(hub)[request_path(request)]
    assert (held["status"], held["claimed_by"], held["result"]) == ("running", "b", "")


def test_the_request_table_asks_the_hub_once_per_page_load(hub):
    """The tab's table (``HubRequests.states``, what a page load calls): one call to the Hub, plus one download
    of each request file not read before; a request made on the tab reads the queue once too."""
    for number in range(3):
        put_request(hub, requested_at=f"2026-01-01T00:00:0{number}+00:00")
    table = HubRequests(queue(hub))

    def calls_for_one_load() -> list[str]:
        before = len(hub.calls)
        assert table.states()["state"].tolist() == ["pending"] * 3
        return [call for call, _ in hub.calls[before:] if REQUESTS in call]

    first = calls_for_one_load()
    assert len(first) == 1 + 3 and first[0] == f"GET /api/datasets/{REQUESTS}"
    assert calls_for_one_load() == [f"GET /api/datasets/{REQUESTS}"]
    before = len(hub.calls)  # a request made on the tab: the queue read once, for its checks and the table after
    assert table.submit(f"hf:{MODEL}", hub.shas[0]).states["state"].tolist() == ["pending"] * 4
    assert [call for call, _ in hub.calls[before:]].count(f"GET /api/datasets/{REQUESTS}") == 1


def test_the_space_refuses_what_the_board_cannot_evaluate(hub):
    requests = queue(hub, max_bytes=10 ** 9, client_hourly_limit=2)
    hub.put_model("org/with-code", {"config.json": b"{}", "modeling_mine.py": b"import os"})
    for model, revision, problem in [
            ("/data/models/clip", "", "names no model"),
            ("hf:./clip", "", "local paths are refused"),
            ("my_models:load_model", "", "runs code of your own"),
            ("vse:model_best.pth", "", "is not a Hub repository"),
            ("open_clip:ViT-B-32/openai", "", "is not a Hub repository"),
            ("hf:org/missing", "", "the Hub has no model repository org/missing"),
            (f"hf:{MODEL}", "no-such-branch", "`revision` 'no-such-branch' of org/tiny-clip does not resolve"),
            ("hf:org/with-code", "", "holds code (modeling_mine.py)")]:
        with pytest.raises(ValueError, match=re.escape(problem)):
            requests.submit(model, revision, client="10.0.0.1")
    with pytest.raises(ValueError, match="more than the board evaluates"):
        queue(hub, max_bytes=100).submit(f"hf:{MODEL}")
    first = requests.submit(f"hf:{MODEL}", client="10.0.0.1")
    assert first["commit"] == hub.shas[1] and first["revision"] == "main"
    with pytest.raises(ValueError, match=f"org/tiny-clip at {hub.shas[1][:12]} \\(fp32\\) is pending already"):
        requests.submit(f"hf:{MODEL}", hub.shas[1], client="10.0.0.2")
    requests.submit(f"hf:{MODEL}", hub.shas[0], client="10.0.0.1")
    with pytest.raises(ValueError, match="2 requests came from your address in the last hour"):
        requests.submit(f"hf:{MODEL}", hub.shas[0], precision="fp16", client="10.0.0.1")
    assert len(hub.files[REQUESTS]) == 2


def worker_process(hub, folder, benchmark, *options) -> subprocess.Popen:
    """``rococo-eval worker`` in a process of its own (a machine of its own) against the fake Hub."""
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"}
    return subprocess.Popen([sys.executable, "-m", "rococo_eval", "worker", "--requests-repo", REQUESTS,
                             "--results-repo", RESULTS, "--benchmark", str(benchmark), "--attacks", "rand_voca",
                             "--device", "cpu", "--work-dir", str(folder), "-q", *options],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_workers_one_request_evaluated_once(hub, benchmark, tmp_path):
    request = put_request(hub)
    workers = [worker_process(hub, tmp_path / name, benchmark, "--once") for name in ("a", "b")]
    for process in workers:
        assert process.wait(120) == 0, process.stderr.read()
    ended = requests_on(hub)[request_path(request)]
    assert ended["status"] == "done" and ended["attempts"] == 1
    assert [record["provenance"]["request_id"] for record in records_on(hub)] == [request["id"]]


@pytest.mark.slow
def test_a_killed_worker_s_request_is_claimed_again_after_its_claim_expires_and_evaluated_once(hub, benchmark,
                                                                                                tmp_path):
    request = put_request(hub)
    hub.model_download_delay_s = 60  # the first worker is killed while it downloads
    first = worker_process(hub, tmp_path / "a", benchmark, "--once")
    deadline = time.monotonic() + 60
    while requests_on(hub)[request_path(request)]["status"] != "running":
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    hub.model_download_delay_s = 0
    # a worker that waits for requests (not --once): it claims the request once the first worker's claim expired,
    # however soon after the kill it starts
    second = worker_process(hub, tmp_path / "b", benchmark, "--claim-expiry", "1", "--poll", "0.2")
    deadline = time.monotonic() + 120
    while requests_on(hub)[request_path(request)]["status"] != "done" and second.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    second.terminate()
    _, errors = second.communicate(timeout=30)
    ended = requests_on(hub)[request_path(request)]
    assert ended["status"] == "done" and ended["attempts"] == 2, errors
    assert [record["provenance"]["request_id"] for record in records_on(hub)] == [request["id"]]


@pytest.mark.slow
def test_a_request_made_in_the_space_comes_onto_its_board_as_evaluated_by_the_board(hub, benchmark, tmp_path,
                                                                                     monkeypatch):
    """Done when of issue 44: a request through the Space's API (gradio_client), evaluated by a worker against the
    fake Hub, is on the Space's board after its timed refresh, marked as evaluated by the board, its source naming
    the model's commit and the record; the tab shows the request done."""
    from gradio_client import Client

    import app
    from helpers.space_app import serve

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("ROCOCO_LEADERBOARD_REPO", RESULTS)
    monkeypatch.setenv("ROCOCO_REQUESTS_REPO", REQUESTS)
    monkeypatch.setenv("ROCOCO_LEADERBOARD_REFRESH_S", "1")
    demo = app.build_app(source=open_source(benchmark=benchmark), output_dir=tmp_path / "outputs",
                         leaderboard_db=tmp_path / "board.sqlite3")
    try:
        client = Client(serve(demo), verbose=False)
        message, states = client.predict(f"hf:{MODEL}", "", "https://example.org/tiny", "fp32",
                                         api_name="/request_evaluation")
        assert f"at commit {hub.shas[1]} (revision main): pending" in message
        assert [row[3] for row in states["data"]] == ["pending"]
        assert worker(hub, tmp_path, benchmark, attacks="rand_voca").run(once=True) == 1
        deadline = time.monotonic() + 60
        while True:
            shown = client.predict("", EVALUATED, "means", 1, api_name="/leaderboard")
            if shown["data"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        (row,) = [dict(zip(shown["headers"], cells)) for cells in shown["data"]]
        assert row["model"] == f"hf:{MODEL}" and row["kind"].startswith(EVALUATED)
        assert f"tree/{hub.shas[1]}" in row["source"] and f"datasets/{RESULTS}/blob/main/submissions/" in row["source"]
        assert [row[3] for row in app.HubRequests.from_environment().states().values.tolist()] == ["done"]
    finally:
        demo.close()
