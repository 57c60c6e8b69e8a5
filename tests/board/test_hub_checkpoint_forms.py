"""The official checkpoint forms named in a Hub repository (``vse:hf-hub:ORG/REPO/PATH.pth``, issue 44): requested
from the board, evaluated by its worker, and run by ``rococo-eval run``, against the fake Hub on 127.0.0.1 serving a
tiny VSE infinity checkpoint written the official way (:func:`helpers.tiny_models.save_vse_checkpoint`) with its
settings file and BERT's vocabulary beside it. BLIP's form takes the same path (the loader's file is downloaded with
what it reads beside it, then read as ``blip:PATH.pth``)."""

import json
import re
import shutil

import huggingface_hub.constants
import pytest

from helpers.fake_hub import make_default_hub
from helpers.tiny_models import TINY_VSE, bert_vocabulary, save_vse_checkpoint, tiny_vse_states, vse_options
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.records import SUMMARY_NUMBERS, read_record
from rococo_eval.board.requests import RequestQueue, read_request
from rococo_eval.board.worker import Worker
from rococo_eval.cli import main
from rococo_eval.data.source import open_source
from rococo_eval.io.download import sha256_of
from rococo_eval.models.adapters import ModelError, check_model_name, load_model
from rococo_eval.models.checkpoints import CheckpointError
from rococo_eval.models.hub_files import HubFile, download_hub_file

REQUESTS, RESULTS, REPO = "org/requests", "org/board", "org/tiny-vse"
CHECKPOINT = "coco_wsl_grid_bert/model_best.pth"
NAME = f"vse:hf-hub:{REPO}/{CHECKPOINT}"


def save_repository(folder, settings=None, extra=None) -> dict:
    """A tiny VSE infinity checkpoint saved the official way in ``folder``/coco_wsl_grid_bert, its settings file
    naming BERT's vocabulary beside it (or holding ``settings``), as a repository holds them: ``{path: bytes}``."""
    opt = vse_options("wsl", input_scale_factor=0.125)  # 32 x 32 images: one cell of the ResNet's grid
    path = folder / CHECKPOINT
    save_vse_checkpoint(path, opt, *tiny_vse_states(opt), extra=extra)
    settings = settings or {"tokenizer": "vocab.txt", "text_num_attention_heads": TINY_VSE["bert_heads"]}
    path.with_suffix(".json").write_text(json.dumps(settings))
    shutil.copy(bert_vocabulary(), path.parent / "vocab.txt")
    return {file.relative_to(folder).as_posix(): file.read_bytes() for file in sorted(folder.rglob("*"))
            if file.is_file()}


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    """The files of the tiny VSE repository (and the folder that holds them, as the local form reads them)."""
    folder = tmp_path_factory.mktemp("tiny-vse")
    return folder, save_repository(folder)


@pytest.fixture
def hub(fake_hub, repository, tmp_path, monkeypatch):
    """The fake Hub holding the tiny VSE repository and empty requests and results repos; huggingface_hub's default
    endpoint is the fake Hub's (as ``$HF_ENDPOINT`` makes it when huggingface_hub is imported), its cache the test's."""
    fake_hub.commit = fake_hub.put_model(REPO, repository[1])
    fake_hub.files[REQUESTS], fake_hub.files[RESULTS] = {}, {}
    make_default_hub(fake_hub, monkeypatch, tmp_path / "hf-cache")
    return fake_hub


def board_worker(hub, folder, benchmark) -> Worker:
    results = HubRecords(RESULTS, folder / "results", endpoint=hub.url, timeout_s=30)
    return Worker(RequestQueue(REQUESTS, endpoint=hub.url), results, open_source(benchmark=benchmark),
                  folder / "work", device="cpu", attacks="rand_voca")


def run_report(model, benchmark, folder) -> dict:
    assert main(["run", "--model", model, "--benchmark", str(benchmark), "--device", "cpu", "--attacks", "rand_voca",
                 "--cache-dir", str(folder / "cache"), "--out", str(folder / "run"), "-q"]) == 0
    return json.loads((folder / "run" / "report.json").read_text())


@pytest.mark.slow
def test_a_checkpoint_file_of_a_repository_is_evaluated_by_the_board_and_run_as_the_local_file(
        hub, repository, benchmark, tmp_path, monkeypatch):
    """A request of ``vse:hf-hub:ORG/REPO/PATH.pth`` is evaluated by the worker at its commit: its numbers are those of
    ``run --model vse:PATH.pth`` on the same files, its provenance hashes the checkpoint; ``run`` takes the Hub form
    too (the same fingerprint: the local run's embeddings are found in the cache), and again offline, from the
    Hugging Face cache."""
    request = RequestQueue(REQUESTS, endpoint=hub.url).submit(NAME)
    assert request["commit"] == hub.commit and request["repo"] == REPO
    ended = board_worker(hub, tmp_path, benchmark).step()
    assert ended["status"] == "done", ended["reason"]
    (record,) = [read_record(data, None, path) for path, data in hub.files[RESULTS].items()]
    assert record["model"] == NAME and record["provenance"]["model_commit"] == hub.commit
    assert record["provenance"]["weight_files"] == {CHECKPOINT: sha256_of(repository[0] / CHECKPOINT)}
    local = run_report(f"vse:{repository[0] / CHECKPOINT}", benchmark, tmp_path / "local")
    rows = [row for row in local["summary"] if "seeds" not in row]
    assert sorted(record["galleries"]) == sorted(f"{row['attack']}/{row['direction']}" for row in rows)
    for row in rows:
        mine = record["galleries"][f"{row['attack']}/{row['direction']}"]
        assert {name: mine[name] for name in SUMMARY_NUMBERS if name in mine} == {
            name: row[name] for name in SUMMARY_NUMBERS if name in mine}
    shutil.copytree(tmp_path / "local" / "cache", tmp_path / "hub" / "cache")
    from_hub = run_report(f"vse:hf-hub:{REPO}@main/{CHECKPOINT}", benchmark, tmp_path / "hub")
    assert from_hub["results"] == local["results"]
    hub.down = True  # offline, the Hugging Face cache answers
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert load_model(NAME, device="cpu").fingerprint == local["meta"]["model_fingerprint"]


def test_the_board_refuses_a_checkpoint_the_repository_does_not_hold(hub):
    """At request time, in one line: a file the commit lacks, a revision in the name, a name that is no file."""
    requests = RequestQueue(REQUESTS, endpoint=hub.url)
    for model, problem in [
            (f"vse:hf-hub:{REPO}/coco_wsl_grid_bert/missing.pth",
             f"`model` 'vse:hf-hub:{REPO}/coco_wsl_grid_bert/missing.pth': {REPO} has no file "
             f"'coco_wsl_grid_bert/missing.pth' at {hub.commit[:12]}"),
            (f"blip:hf-hub:{REPO}@v1/model.pth", "give the revision 'v1' as the request's revision, not in the name"),
            (f"blip:hf-hub:{REPO}", f"'hf-hub:{REPO}' names no file of a Hub repository: expected hf-hub:ORG/REPO/PATH"),
            ("vse:model_best.pth", "is not a Hub repository")]:
        with pytest.raises(ValueError, match=re.escape(problem)):
            requests.submit(model)
    assert hub.files[REQUESTS] == {}
    with pytest.raises(ModelError, match=re.escape(f"`model` 'vse:hf-hub:{REPO}/../x.pth': '../x.pth' is no path")):
        check_model_name(f"vse:hf-hub:{REPO}/../x.pth")
    with pytest.raises(ModelError, match=re.escape(f"`model` 'vse:hf-hub:{REPO}@../x.pth': '..' is no revision")):
        check_model_name(f"vse:hf-hub:{REPO}@../x.pth")


def test_the_worker_reads_one_repository_at_one_commit_and_pickles_through_the_allowlist(hub, benchmark, tmp_path):
    """A checkpoint whose vocabulary would come from another repository (the default ``bert-base-uncased``), one
    whose pickle needs ``eval``, and a ``blip:`` file that BLIP's loader finds is no BLIP checkpoint: each request
    ends failed in one line, and nothing of the pickle runs."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return eval, (f"open({str(marker)!r}, 'w').close()",)

    hub.put_model("org/default-vocabulary", save_repository(tmp_path / "a", settings={"text_num_attention_heads": 2}))
    hub.put_model("org/hostile", save_repository(tmp_path / "b", extra={"hook": Payload()}))
    hub.put_model("org/not-blip", {path.replace("model_best", "model"): data for path, data in
                                   hub.model_files[REPO].items()})
    queue = RequestQueue(REQUESTS, endpoint=hub.url)
    for model in (f"vse:hf-hub:org/default-vocabulary/{CHECKPOINT}", f"vse:hf-hub:org/hostile/{CHECKPOINT}",
                  "blip:hf-hub:org/not-blip/coco_wsl_grid_bert/model.pth"):
        queue.submit(model)
    assert board_worker(hub, tmp_path, benchmark).run(once=True) == 3
    reasons = {request["repo"]: request["reason"] for request in
               (read_request(data, path) for path, data in hub.files[REQUESTS].items())}
    assert "reads tokenizer 'bert-base-uncased' (the default) from outside org/default-vocabulary at" in reasons[
        "org/default-vocabulary"]
    assert "model_best.pth' needs eval to be read, which is not on the allowlist" in reasons["org/hostile"]
    assert "coco_wsl_grid_bert/model.pth' is not a BLIP retrieval checkpoint" in reasons["org/not-blip"]
    assert not marker.exists() and hub.files[RESULTS] == {}
    assert all("\n" not in reason for reason in reasons.values())


def test_a_settings_file_naming_a_path_outside_its_repository_is_refused(hub, tmp_path):
    """A settings file whose relative path climbs out of the snapshot folder (into the Hugging Face cache, or past it
    to a file of the machine) names no file of the repository: refused in one line, for ``run`` as for the board,
    before the loader would read that file."""
    (tmp_path / "outside.txt").write_text("[PAD]\n")  # tmp_path/hf-cache/models--org--escape/snapshots/COMMIT/...
    escape = "../../../../../outside.txt"
    hub.put_model("org/escape", {CHECKPOINT: b"not read", CHECKPOINT.replace(".pth", ".json"): json.dumps(
        {"tokenizer": escape}).encode()})
    for own_files_only in (True, False):
        with pytest.raises(CheckpointError, match=re.escape(
                f"`model` 'vse:...': its settings file coco_wsl_grid_bert/model_best.json names tokenizer "
                f"{escape!r}, outside org/escape")):
            download_hub_file(HubFile("org/escape", CHECKPOINT), "`model` 'vse:...'", own_files_only=own_files_only)


def test_every_file_of_a_checkpoint_comes_from_the_commit_asked_for(hub):
    """The checkpoint, its settings file and the vocabulary it names are read at one commit: the request's (the
    worker's ``revision``) or the name's ``@REVISION``, not the branch's head after a later commit."""
    settings = CHECKPOINT.replace(".pth", ".json")
    old = {CHECKPOINT: b"old weights", settings: b'{"tokenizer": "vocab.txt"}', "coco_wsl_grid_bert/vocab.txt": b"old"}
    old_commit = hub.put_model("org/moving", old)
    hub.put_model("org/moving", {path: data.replace(b"old", b"new") for path, data in old.items()})
    for hub_file, revision in [(HubFile("org/moving", CHECKPOINT), old_commit),
                               (HubFile("org/moving", CHECKPOINT, old_commit), None)]:
        folder, read = download_hub_file(hub_file, "`model` 'vse:...'", revision=revision, own_files_only=True)
        assert folder.name == old_commit and read == [CHECKPOINT, settings, "coco_wsl_grid_bert/vocab.txt"]
        assert {path: (folder / path).read_bytes() for path in read} == old
    folder, _ = download_hub_file(HubFile("org/moving", CHECKPOINT), "`model` 'vse:...'")
    assert (folder / CHECKPOINT).read_bytes() == b"new weights"


def test_only_the_settings_a_loader_reads_as_paths_are_downloaded(hub):
    """Of a settings file's strings, only ``tokenizer`` and ``region_features`` name files to download (the loader
    refuses any other key): a settings file of many other keys costs no download each."""
    settings = CHECKPOINT.replace(".pth", ".json")
    files = {CHECKPOINT: b"weights", settings: json.dumps({"tokenizer": "vocab.txt", "other": "other.bin"}).encode(),
             "coco_wsl_grid_bert/vocab.txt": b"[PAD]", "coco_wsl_grid_bert/other.bin": b"not read"}
    hub.put_model("org/other-settings", files)
    folder, read = download_hub_file(HubFile("org/other-settings", CHECKPOINT), "`model` 'vse:...'")
    assert read == [CHECKPOINT, settings, "coco_wsl_grid_bert/vocab.txt"]
    assert not (folder / "coco_wsl_grid_bert/other.bin").exists()
