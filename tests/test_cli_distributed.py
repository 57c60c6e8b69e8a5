"""``rococo-eval run`` and ``attack`` launched by torchrun as 2 and 3 processes (gloo, on CPU), against one process.

Every launch is real: ``python -m torch.distributed.run --standalone --nproc-per-node N -m rococo_eval ...``, on a
generated benchmark of 12 images (``conftest.benchmark``: every attack, seeds 1 and 7), with a tiny CLIP and a
tiny BLIP. A dying rank is a process that sends itself SIGKILL (``helpers/dying_rank.py``).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rococo_eval.cli import main

REPO = Path(__file__).resolve().parents[1]
DYING_RANK = REPO / "tests" / "helpers" / "dying_rank.py"
pytestmark = pytest.mark.slow


def launch(processes: int, *arguments, script=None, check=True, hash_seed=None) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node processes`` of ``-m rococo_eval ARGUMENTS`` (or of ``script``)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    command += [str(script)] if script else ["-m", "rococo_eval"]
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if hash_seed is not None:
        environment["PYTHONHASHSEED"] = str(hash_seed)
    done = subprocess.run(command + [str(argument) for argument in arguments], capture_output=True, text=True,
                          env=environment, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def run_arguments(model, benchmark, folder: Path, name: str, *extra, quiet=True):
    return ["run", "--model", model, "--benchmark", benchmark, "--cache-dir", folder / f"cache-{name}",
            "--out", folder / f"report-{name}", "--batch-size", "4", *(["--quiet"] if quiet else []), *extra]


def one_process(model, benchmark, folder, *extra) -> bytes:
    assert main([str(argument) for argument in run_arguments(model, benchmark, folder, "1", *extra)]) == 0
    return (folder / "report-1" / "report.json").read_bytes()


@pytest.fixture(params=["dual encoder", "BLIP"])
def model(request, hf_name, blip_name):
    return {"dual encoder": (hf_name, []), "BLIP": (blip_name, ["--rerank-k", "5"])}[request.param]


@pytest.fixture(scope="module")
def references(benchmark, tmp_path_factory):
    """The report of one process for each model and the folder of that run (its cache is ``cache-1``), made when
    first asked for (once for the module)."""
    made = {}

    def of(model) -> tuple[bytes, Path]:
        name, extra = model
        if name not in made:
            folder = tmp_path_factory.mktemp("one")
            made[name] = one_process(name, benchmark, folder, *extra), folder
        return made[name]
    return of


@pytest.fixture
def reference(model, references):
    """The report of one process."""
    return references(model)[0]


def test_three_processes_give_the_report_of_one_each_row_embedded_once(model, benchmark, reference, tmp_path):
    """Three processes (item sets that do not split evenly): one process's report, byte for byte; the processes' rows
    and ITM pairs add up to what the cache holds (none computed twice, none lost) and every process did some; the
    ranks' shards are joined. Two processes: ``test_a_damaged_cache_...`` and the dying-rank reruns."""
    name, extra = model
    count = tmp_path / "counts.jsonl"
    done = launch(3, "--count", count, "--", *run_arguments(name, benchmark, tmp_path, "n", *extra, quiet=False),
                  script=DYING_RANK)
    assert (tmp_path / "report-n" / "report.json").read_bytes() == reference
    for rank in (1, 2):
        assert f"rank {rank} of 3: done; rank 0 writes the report" in done.stderr
    counts = [json.loads(line) for line in count.read_text().splitlines()]
    assert sorted(entry["rank"] for entry in counts) == [0, 1, 2] and all(entry["rows"] > 0 for entry in counts)
    total = held(tmp_path / "cache-n")
    assert sum(entry["rows"] for entry in counts) == total["rows"]
    assert sum(entry["pairs"] for entry in counts) == total["pairs"] and (total["pairs"] > 0) == bool(extra)
    assert_shards_joined(tmp_path / "cache-n")


def assert_shards_joined(cache: Path) -> None:
    embeddings = next((cache / "embeddings").iterdir())
    assert not list(embeddings.glob("*/rows-*.npy")) and not list(embeddings.glob("*/pairs-*-rank*.npz"))


def held(cache: Path) -> dict:
    """The embedding rows and ITM pairs that ``cache`` holds, joined or in shards."""
    rows = sum(np.load(path, mmap_mode="r").shape[0] for path in cache.glob("embeddings/*/*/*.npy"))
    pairs = 0
    for path in cache.glob("embeddings/*/itm-*/pairs-*.npz"):
        with np.load(path) as shard:
            pairs += len(shard["keys"])
    return {"rows": rows, "pairs": pairs}


def without_counts(report: bytes) -> dict:
    """A report without its ITM pair counts (a resumed run computes fewer and reuses more)."""
    document = json.loads(report)
    document["meta"].pop("rerank", None)
    return document


@pytest.mark.parametrize("model, how", [("dual encoder", "kill"), ("BLIP", "kill"), ("BLIP", "raise")],
                         indirect=["model"])
def test_a_dying_rank_is_named_and_the_rerun_resumes(model, benchmark, reference, tmp_path, how):
    """Rank 1 dies at its second embedding batch (CLIP) or ITM call (BLIP). The failure names rank 1; the same
    command again computes exactly what no shard holds (the batches in flight), and gives one process's report.

    Killed, a rank leaves what it wrote and nothing else, at either stage. Raising, it also runs the loaders' clean-up
    and the command's handler, the same at both stages (nothing is written on the way out): the ITM stage, the later
    one, is where it is checked."""
    name, extra = model
    arguments = run_arguments(name, benchmark, tmp_path, "n", *extra)
    what = "match" if extra else "encode"
    died = launch(2, "--die", f"1:{what}:2:{how}", "--", *arguments, script=DYING_RANK, check=False)
    assert died.returncode != 0 and not (tmp_path / "report-n" / "report.json").exists()
    if how == "kill":  # torchrun names the rank that died, and its signal
        assert "rank      : 1 (local_rank: 1)" in died.stderr and "Signal 9 (SIGKILL)" in died.stderr
    else:
        assert "rococo-eval: rank 1 of 2: failed" in died.stderr and f"stopped at its {what} call 2" in died.stderr
    kept = held(tmp_path / "cache-n")
    count = tmp_path / "counts.jsonl"
    launch(2, "--count", count, "--", *arguments, script=DYING_RANK)
    resumed = (tmp_path / "report-n" / "report.json").read_bytes()
    again = [json.loads(line) for line in count.read_text().splitlines()]
    total = held(tmp_path / "cache-n")
    if extra:
        assert without_counts(resumed) == without_counts(reference)
        assert sum(entry["rows"] for entry in again) == 0  # the embeddings were all done before the ITM stage
        assert 0 < sum(entry["pairs"] for entry in again) == total["pairs"] - kept["pairs"] < total["pairs"]
        assert json.loads(resumed)["meta"]["rerank"]["itm_pairs_computed"] == total["pairs"] - kept["pairs"]
    else:
        assert resumed == reference
        assert 0 < sum(entry["rows"] for entry in again) == total["rows"] - kept["rows"] < total["rows"]


def test_a_damaged_cache_is_noticed_by_every_rank_and_changes_no_number(model, benchmark, references, tmp_path):
    """The one-process run's cache (a copy), its finished embeddings flipped and its ITM shards cut short: two
    processes drop and recompute what is damaged, name it, and give one process's report, whose warnings name every
    damaged file, whichever rank found it."""
    name, extra = model
    reference, one = references(model)
    cache = tmp_path / "cache-n"
    shutil.copytree(one / "cache-1", cache)
    damaged = sorted(cache.rglob("embeddings.*.npy"))[:2] + sorted(cache.rglob("pairs-*.npz"))[:2]
    for path in damaged:
        data = bytearray(path.read_bytes())
        path.write_bytes(bytes(data[:len(data) // 2]) if path.suffix == ".npz" else bytes(data[:-8]) + bytes(8))
    done = launch(2, *run_arguments(name, benchmark, tmp_path, "n", *extra, quiet=False))
    resumed = without_counts((tmp_path / "report-n" / "report.json").read_bytes())
    warnings = resumed["meta"].pop("warnings")  # every rank's, in the report that rank 0 writes
    assert resumed == without_counts(reference)
    for path in damaged:
        assert str(path) in done.stderr, path
        assert any(str(path) in warning for warning in warnings), path
    assert "rank 1 of 2: done; rank 0 writes the report" in done.stderr
    assert_shards_joined(cache)


def test_shard_models_spreads_whole_models_over_the_processes(hf_name, blip_name, benchmark, tmp_path):
    """Two models over two processes: each evaluates one alone, and each report equals that of plain ``run``."""
    out = tmp_path / "reports"
    done = launch(2, "run", "--model", hf_name, "--model", blip_name, "--rerank-k", "5", "--shard-models",
                  "--benchmark", benchmark, "--cache-dir", tmp_path / "cache", "--out", out, "--batch-size", "4",
                  "--attacks", "rand_voca,mix_seed1")
    folders = sorted(path for path in out.iterdir() if path.is_dir())
    assert len(folders) == 2 and "rank 0 of 2: 1 of the 2 models done" in done.stderr
    assert "rank 1 of 2: 1 of the 2 models done" in done.stderr
    assert main([str(argument) for argument in [
        "run", "--model", hf_name, "--model", blip_name, "--rerank-k", "5", "--benchmark", benchmark, "--cache-dir",
        tmp_path / "cache-one", "--out", tmp_path / "one", "--batch-size", "4", "--attacks", "rand_voca,mix_seed1",
        "--quiet"]]) == 0
    for folder in folders:
        assert (folder / "report.json").read_bytes() == (tmp_path / "one" / folder.name / "report.json").read_bytes()
    table = (tmp_path / "one" / "table.md").read_text()
    assert hf_name in table and blip_name in table and "rand_voca (i2t)" in table


def test_attack_shares_the_text_encoder_and_writes_the_same_benchmark(image_set, benchmark, tmp_path):
    """``rococo-eval attack`` as 2 processes: the same benchmark folder, file for file, as one process, each under
    its own PYTHONHASHSEED (same_concept's replacements once depended on it).

    The one process is this one (its own hash seed, not the launch's), with a copy of the encoder cache that
    ``benchmark`` filled from the same captions: it reads the encodings back; the 2 processes compute theirs."""
    arguments = ["attack", str(image_set / "set.json"), "--strategies", "text", "--quiet"]
    shutil.copytree(Path(benchmark).parent / "cache", tmp_path / "cache-one")
    assert main(arguments + ["--out", str(tmp_path / "one"), "--cache-dir", str(tmp_path / "cache-one")]) == 0
    launch(2, *arguments, "--out", tmp_path / "two", "--cache-dir", tmp_path / "cache-two",
           hash_seed=2 if os.environ.get("PYTHONHASHSEED") == "1" else 1)
    files = sorted(path.relative_to(tmp_path / "one") for path in (tmp_path / "one").rglob("*") if path.is_file())
    assert files == sorted(path.relative_to(tmp_path / "two") for path in (tmp_path / "two").rglob("*")
                           if path.is_file())
    for name in files:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_compact_scores_for_a_dual_encoder_are_refused_on_every_rank(hf_name, benchmark, tmp_path):
    """Each rank refuses at once (none is left embedding while rank 0 stops), and nothing is saved."""
    done = launch(2, *run_arguments(hf_name, benchmark, tmp_path, "n", "--save-scores", tmp_path / "scores",
                                    "--compact-scores"), check=False)
    assert done.returncode != 0
    for rank in (0, 1):
        assert f"rococo-eval: rank {rank} of 2: error: --compact-scores: {hf_name} is a dual encoder" in done.stderr
    assert not list((tmp_path / "report-n").rglob("*")) and not list((tmp_path / "cache-n").rglob("*.npy"))
    assert not (tmp_path / "scores").exists() or not list((tmp_path / "scores").iterdir())
