"""How close ``rococo-eval run`` comes to the speed of reading the images, as ratios measured in one run.

    python benchmarks/bench_pipeline.py [--repeat N] [--batch-size B] [--images N]
        [--data DIR] [--old REV | --skip-old] [--annotations-dir DIR]

The model is a tiny random CLIP (``transformers``, 224 x 224 input, one layer of width 32) with the real CLIP
tokenizer (vocabulary and merges from open_clip's ``bpe_simple_vocab_16e6.txt.gz``, the file OpenAI published),
so that the run measures the data pipeline, not the model. The images are synthetic COCO-like JPEGs, made once
into ``--data`` (default ``~/.cache/rococo-eval/bench``) and laid out as a COCO root: 640 x 480 (a quarter
480 x 640, every 50th grayscale), smooth content with grain, quality 90, about 90 kB each (COCO's: 160).
``--images N`` makes only the first N images that size and the others 32 x 24, to scale the run down.

Each measurement runs in a fresh child process (its peak RSS is its own):

- floors: decoding and resizing the originals to 224 (the processor's bicubic shortest-edge resize) on all
  cores; making the 5,000 ``mix_seed1`` images with each original decoded once, on all cores; tokenising the
  captions in batches as a run does (50,010 for ``rand_voca``, 25,010 for ``mix_seed1``);
- ``rococo-eval run --attacks rand_voca`` and ``--attacks mix_seed1`` (a fresh cache each, ``-q``, the whole
  command: imports, model, embedding, scoring, report; at ``--batch-size``, default the command's own), then
  again on its full cache (what a run costs besides reading and embedding the data), now and, unless
  ``--skip-old``, with the package and the metric as committed at ``--old`` (default ``HEAD``; ``git archive``):
  at the same batch size, and their cached embeddings compared bit for bit;
- with ``--repeat N``, N rounds of the floors and the runs, interleaved (this machine's speed drifts by 20% over
  minutes): times are medians over the rounds, ratios the median of each run's ratio to its own round's floor;
- an estimate of the fastest each run could be on this machine if nothing it does besides the floor's work
  overlapped that work: its floor, plus its cached run (loading the model, scoring, the report; one sample, on
  the first round's cache, after the rounds), plus the CPU time of its forward passes spread over all cores. It
  is no strict bound: the floor leaves a little CPU idle, and a run can overlap a little (next item);
- in each round, loading the model and decoding + resizing the first 1,000 originals (at most ``--images``),
  one after the other and at once (the model in a thread): how much of the loading, which the floor does not
  count, can hide behind the data work;
- embedding the originals alone: images per second against ``--workers`` (1, 2, ...); and the originals and
  the 25,010 captions: time and peak RSS against ``--batch-size``.

The children run torch on one thread (``torch.set_num_threads(1)``), standing in for a model on an accelerator:
on a CPU shared with the image workers, torch's own threads compete with them (the tiny model's forward pass
took 5 ms per image on two threads there, 0.75 ms on one). Besides wall time, each row gives the CPU time of
all the child's threads: on a machine shared with other work, wall time depends on the load (printed), CPU
time much less. A run's row also gives the wall time of loading the model and the CPU time of the model's forward
passes (the thread CPU time inside its ``encode_`` methods): work the floor does not count, and the second of
which a model on an accelerator would not do on the CPU.
"""

import argparse
import gzip
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

IMAGE_SIZE = 224
CPUS = os.cpu_count() or 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=5000, help="realistic-size images (default all 5,000)")
    parser.add_argument("--data", type=Path, default=Path.home() / ".cache" / "rococo-eval" / "bench",
                        help="where the model and the images are made once")
    parser.add_argument("--annotations-dir", help="official annotation files (default $ROCOCO_ANNOTATIONS_DIR)")
    parser.add_argument("--batch-size", type=int, help="batch size of the runs (default: the command's)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of floors and runs, interleaved; medians are reported (default 1)")
    parser.add_argument("--workers", default=",".join(map(str, sorted({1, CPUS}))),
                        help="worker counts to measure images/s at (default 1 and the CPU count)")
    parser.add_argument("--batch-sizes", default="16,64,256", help="batch sizes to measure peak RSS at")
    parser.add_argument("--old", default="HEAD", help="the commit whose pipeline the old runs use (default HEAD)")
    parser.add_argument("--skip-old", action="store_true", help="do not run the committed (--old) pipeline")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        result = CHILD_TASKS[json.loads(args.child)["task"]](json.loads(args.child))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({**result, "cpu_seconds": usage.ru_utime + usage.ru_stime}))
        return
    for name in ("repeat", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.batch_size is None:  # imported here: a child imports nothing of the package before its clock starts
        from rococo_eval.models.cache import DEFAULT_BATCH_SIZE

        args.batch_size = DEFAULT_BATCH_SIZE
    if args.annotations_dir:
        os.environ["ROCOCO_ANNOTATIONS_DIR"] = str(Path(args.annotations_dir).resolve())
    data = args.data.expanduser()
    model_dir = make_tiny_clip(data / "tiny-clip-224")
    coco = make_coco_root(data / f"coco-{args.images}", args.images)
    common = {"model": str(model_dir), "coco": str(coco), "batch_size": args.batch_size}
    print(f"# {args.images} realistic-size images in {coco}; {CPUS} CPUs; batch size {args.batch_size}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    old_package = None if args.skip_old else committed_package(args.old)
    old_label = f"old ({args.old})"
    rounds = []
    for _ in range(args.repeat):  # floors and runs interleaved: each run's ratio is to the floor of its round
        rounds.append(measure_round(common, old_package, old_label, min(OVERLAP_IMAGES, args.images)))
    first = rounds[0]
    for attack in ATTACKS:
        first[attack]["runs"][CACHED_LABEL] = child(
            {"task": "run", "attack": attack, "cache": first[attack]["runs"]["new"]["cache"], **common})
        if old_package:
            same = all(same_embeddings(found[attack]["runs"]["new"]["cache"], found[attack]["runs"][old_label]["cache"])
                       for found in rounds)
            print(f"{attack}: embeddings of the new and the old pipeline bit-identical: {same}", flush=True)
    print()
    print(f"{args.repeat} round(s); a time is the median over the rounds, a ratio the median of each round's ratio "
          f"to the floor of its round (lowest-highest after it)")
    print()
    print("| step | time (s) | x floor | CPU time (s) | x floor | peak RSS (MB) | loading the model (s) | "
          "model's forward passes, CPU (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for attack in ATTACKS:
        for label in first[attack]["runs"]:
            runs = [(found[attack]["runs"][label], found[attack]) for found in rounds if label in found[attack]["runs"]]
            print(f"| `run --attacks {attack}` ({label}) | {_median([run['seconds'] for run, _ in runs]):.1f} | "
                  f"{_ratio([run['seconds'] / floor['seconds'] for run, floor in runs])} | "
                  f"{_median([run['cpu_seconds'] for run, _ in runs]):.1f} | "
                  f"{_ratio([run['cpu_seconds'] / floor['cpu_seconds'] for run, floor in runs])} | "
                  f"{_median([run['peak_mb'] for run, _ in runs]):.0f} | "
                  f"{_median([run['load_seconds'] for run, _ in runs]):.1f} | "
                  f"{_median([run['forward_cpu_seconds'] for run, _ in runs]):.1f} |")
        floors = [found[attack] for found in rounds]
        parts = ", ".join(f"{name} {_median([floor['parts'][name] for floor in floors]):.1f} s"
                          for name in floors[0]["parts"])
        print(f"| floor of `run --attacks {attack}`: {parts} | {_median([f['seconds'] for f in floors]):.1f} | 1.00 | "
              f"{_median([f['cpu_seconds'] for f in floors]):.1f} | 1.00 | | | |")
        cached = first[attack]["runs"][CACHED_LABEL]["seconds"]
        estimates = [found["seconds"] + cached + found["runs"]["new"]["forward_cpu_seconds"] / CPUS for found in floors]
        print(f"| no-overlap estimate of `run --attacks {attack}` here: its floor, its cached run, and its forward "
              f"passes' CPU time spread over {CPUS} cores | {_median(estimates):.1f} | "
              f"{_ratio([estimate / found['seconds'] for estimate, found in zip(estimates, floors)])} | | | | | |")
    print(f"(CPU time of a floor: its own work only, without the imports of its process; of a run: the whole "
          f"process. The forward passes' CPU time is what a model on an accelerator would not spend on the CPU; "
          f"for the old pipeline it includes tokenizing. Load average now {os.getloadavg()[0]:.1f})")

    print()
    print(f"| loading the model and decoding + resizing {min(OVERLAP_IMAGES, args.images):,} originals | wall (s) | "
          "CPU time (s) | loading (s) | decoding (s) |")
    print("|---|---|---|---|---|")
    for together, label in OVERLAP_WAYS:
        samples = [found["overlap"][together] for found in rounds]
        print(f"| {label} | " + " | ".join(_spread([sample[key] for sample in samples]) for key in
                                          ("seconds", "work_cpu_seconds", "load_seconds", "decode_seconds")) + " |")

    print()
    print("| embedding | images/s | time (s) | CPU time (s) | peak RSS (MB) | RSS above the loaded model (MB) |")
    print("|---|---|---|---|---|---|")
    for workers in map(int, args.workers.split(",")):
        result = child({"task": "embed", "workers": workers, **common})
        print(f"| 5,000 originals, --workers {workers}, --batch-size {args.batch_size} | {result['rate']:.0f} | "
              f"{result['seconds']:.1f} | {result['work_cpu_seconds']:.1f} | {result['peak_mb']:.0f} | "
              f"{result['extra_mb']:.0f} |", flush=True)
    for batch_size in map(int, args.batch_sizes.split(",")):
        result = child({"task": "embed", "workers": CPUS, "captions": True, **{**common, "batch_size": batch_size}})
        print(f"| 5,000 originals and 25,010 captions, --workers {CPUS}, --batch-size {batch_size} | "
              f"{result['rate']:.0f} | {result['seconds']:.1f} | {result['work_cpu_seconds']:.1f} | "
              f"{result['peak_mb']:.0f} | {result['extra_mb']:.0f} |", flush=True)


ATTACKS = ("rand_voca", "mix_seed1")
CACHED_LABEL = "new, all cached: imports, model, scoring, report"
OVERLAP_IMAGES = 1000
OVERLAP_WAYS = ((False, "one after the other"), (True, f"at once: loading in a thread, decoding in {CPUS} threads"))


def measure_round(common: dict, old_package, old_label: str, overlap_images: int) -> dict:
    """One round: the floors, then the runs of each attack (new, and old with ``old_package``), fresh caches, then
    loading the model and decoding ``overlap_images`` originals, one after the other and at once (under
    ``"overlap"``, keyed by at once or not)."""
    decode = child({"task": "floor_decode", **common})
    alter = child({"task": "floor_alter", **common})
    tokens = {attack: child({"task": "floor_tokenize", "attack": attack, **common}) for attack in ATTACKS}
    parts = {"rand_voca": {"decode + resize": decode, "tokenising 50,010 captions": tokens["rand_voca"]},
             "mix_seed1": {"decode + resize": decode, "5,000 mix_seed1 images": alter,
                           "tokenising 25,010 captions": tokens["mix_seed1"]}}
    found = {}
    for attack in ATTACKS:
        found[attack] = {"seconds": sum(part["seconds"] for part in parts[attack].values()),
                         "cpu_seconds": sum(part["work_cpu_seconds"] for part in parts[attack].values()),
                         "parts": {name: part["seconds"] for name, part in parts[attack].items()},
                         "runs": {"new": child({"task": "run", "attack": attack, **common})}}
        if old_package:
            found[attack]["runs"][old_label] = child({"task": "run", "attack": attack, "package": str(old_package),
                                                      **common})
        run = found[attack]["runs"]["new"]
        print(f"{attack}: floor {found[attack]['seconds']:.1f} s, run {run['seconds']:.1f} s "
              f"({run['seconds'] / found[attack]['seconds']:.2f}x)", flush=True)
    found["overlap"] = {together: child({"task": "overlap", "images": overlap_images, "together": together, **common})
                        for together, _ in OVERLAP_WAYS}
    return found


def _median(values) -> float:
    return float(np.median(values))


def _spread(values) -> str:
    """The median, and the lowest and highest when there are several."""
    text = f"{np.median(values):.1f}"
    return text if len(values) == 1 else f"{text} ({min(values):.1f}-{max(values):.1f})"


def _ratio(ratios) -> str:
    """The median ratio, and the lowest and highest when there are several."""
    text = f"{np.median(ratios):.2f}"
    return text if len(ratios) == 1 else f"{text} ({min(ratios):.2f}-{max(ratios):.2f})"


def child(task: dict) -> dict:
    """Run one measurement in a fresh process, at low priority; return what it reports."""
    command = ["nice", "-n", "10", sys.executable, __file__, "--child", json.dumps(task)]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        raise SystemExit(f"measurement {task['task']} failed (status {finished.returncode}):\n{finished.stderr}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _source(task):
    from rococo_eval.data.source import RococoSource

    return RococoSource(images_dir=task["coco"])


def floor_decode(task) -> dict:
    """Read, decode and resize every original to 224 (bicubic, shortest edge) on all cores."""
    source = _source(task)
    paths = [source.images_dir / name for name in source.image_files]
    started, cpu = time.perf_counter(), _cpu()
    with ThreadPoolExecutor(CPUS) as pool:
        list(pool.map(_decode_and_resize, paths, chunksize=16))
    return {"seconds": time.perf_counter() - started, "work_cpu_seconds": _cpu() - cpu}


def _decode_and_resize(path) -> tuple:
    """Read and decode one image, RGB, resized as the processor does (bicubic, shortest edge to 224)."""
    image = Image.open(path)
    image.load()
    image = image if image.mode == "RGB" else image.convert("RGB")
    width, height = image.size
    scale = IMAGE_SIZE / min(width, height)
    return image.resize((max(IMAGE_SIZE, int(width * scale)), max(IMAGE_SIZE, int(height * scale))),
                        Image.Resampling.BICUBIC).size


def overlap(task) -> dict:
    """Load the model and decode + resize the first ``task["images"]`` originals (as :func:`floor_decode`), one
    after the other (``task["together"]`` false) or at once: the model in one thread, the images in ``CPUS``."""
    source = _source(task)
    paths = [source.images_dir / name for name in source.image_files[:task["images"]]]

    def load() -> float:
        started = time.perf_counter()
        from rococo_eval.models.adapters import load_model

        load_model(f"hf:{task['model']}", device="cpu")
        return time.perf_counter() - started

    def decode() -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(CPUS) as pool:
            list(pool.map(_decode_and_resize, paths, chunksize=16))
        return time.perf_counter() - started

    started, cpu = time.perf_counter(), _cpu()
    if task["together"]:
        with ThreadPoolExecutor(1) as loader:
            loading = loader.submit(load)
            decode_seconds = decode()
            load_seconds = loading.result()  # the loading thread's error, if any, raised here
    else:
        load_seconds, decode_seconds = load(), decode()
    return {"seconds": time.perf_counter() - started, "work_cpu_seconds": _cpu() - cpu, "load_seconds": load_seconds,
            "decode_seconds": decode_seconds}


def floor_alter(task) -> dict:
    """Make the 5,000 mix_seed1 JPEGs, one official batch at a time, each original decoded and resized once."""
    from rococo_eval.attacks.images import BATCH_SIZE, alter_image, encode_jpeg, load_mix_table, resize

    source = _source(task)
    table = load_mix_table("mix", 1)
    batches = [table.order[start:start + BATCH_SIZE] for start in range(0, len(table.order), BATCH_SIZE)]

    def work(batch):
        resized = {}
        for index in batch:
            image = Image.open(source.images_dir / source.image_files[index])
            image.load()
            resized[index] = resize(image)
        return [encode_jpeg(alter_image(resized[i], resized[table.partner[i]], "mix")) for i in batch]

    started, cpu = time.perf_counter(), _cpu()
    with ThreadPoolExecutor(CPUS) as pool:
        made = sum(len(jpegs) for jpegs in pool.map(work, batches))
    return {"seconds": time.perf_counter() - started, "work_cpu_seconds": _cpu() - cpu, "images": made}


def floor_tokenize(task) -> dict:
    """Tokenise the run's captions in batches, as the model adapter does."""
    import transformers

    source = _source(task)
    captions = source.ground_truth_captions()
    if task["attack"] == "rand_voca":
        captions = captions + source.adversarial_captions("rand_voca")
    tokenizer = transformers.AutoTokenizer.from_pretrained(task["model"])
    size = task["batch_size"]
    started, cpu = time.perf_counter(), _cpu()
    for start in range(0, len(captions), size):
        tokenizer(captions[start:start + size], padding=True, truncation=True, max_length=77, return_tensors="pt")
    return {"seconds": time.perf_counter() - started, "work_cpu_seconds": _cpu() - cpu, "captions": len(captions)}


def run(task) -> dict:
    """``rococo-eval run`` in this process, with the package at ``task["package"]`` when given."""
    if task.get("package"):
        sys.path.insert(0, task["package"])
        for name in [name for name in sys.modules if name.startswith(("rococo_eval", "rococo_recall"))]:
            del sys.modules[name]
    from rococo_eval.cli import main as cli_main

    spent = _time_the_model()
    work = Path(tempfile.mkdtemp(prefix="rococo-bench-run-"))
    cache = task.get("cache") or str(work / "cache")
    argv = ["run", "--model", f"hf:{task['model']}", "--attacks", task["attack"], "--images-dir", task["coco"],
            "--cache-dir", cache, "--out", str(work / "report"), "--device", "cpu",
            "--batch-size", str(task["batch_size"]), "-q"]
    started = time.perf_counter()
    status = cli_main(argv)
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"rococo-eval run failed with status {status}")
    return {"seconds": seconds, "peak_mb": _peak_mb(), "cache": cache, **spent}


def _time_the_model() -> dict:
    """Count, in the returned dict, the wall time of loading the model (``load_seconds``) and the CPU time of its
    forward passes (``forward_cpu_seconds``: the thread CPU time inside its ``encode_`` methods), which a model on
    an accelerator would not spend on the CPU."""
    import rococo_eval.models.adapters as models

    spent = {"load_seconds": 0.0, "forward_cpu_seconds": 0.0}
    load = models.load_model

    def timed_load(*args, **kwargs):
        started = time.perf_counter()
        try:
            return load(*args, **kwargs)
        finally:
            spent["load_seconds"] += time.perf_counter() - started

    def timed(method):
        def forward(self, *args, **kwargs):
            started = time.thread_time()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent["forward_cpu_seconds"] += time.thread_time() - started
        return forward

    models.load_model = timed_load
    text = "encode_tokenized" if hasattr(models.HFModel, "encode_tokenized") else "encode_texts"  # none before 341fbba
    image = "encode_preprocessed" if hasattr(models.HFModel, "encode_preprocessed") else "encode_images"
    for name in (text, image):
        setattr(models.HFModel, name, timed(getattr(models.HFModel, name)))
    return spent


def embed(task) -> dict:
    """Embed the originals (and with ``captions`` the ground-truth captions) through the cache."""
    from rococo_eval.models.adapters import load_model
    from rococo_eval.models.cache import EmbeddingCache
    from rococo_eval.scoring.galleries import ground_truth_captions, original_images

    source = _source(task)
    model = load_model(f"hf:{task['model']}", device="cpu")
    items = original_images(source)
    cache = EmbeddingCache(tempfile.mkdtemp(prefix="rococo-bench-embed-"), batch_size=task["batch_size"],
                           workers=task["workers"])
    captions = ground_truth_captions(source) if task.get("captions") else None
    before = _rss_mb()
    started, cpu = time.perf_counter(), _cpu()
    cache.embeddings(model, items)
    rate = len(items) / (time.perf_counter() - started)
    if captions is not None:
        cache.embeddings(model, captions)
    seconds = time.perf_counter() - started
    shutil.rmtree(cache.root)
    return {"seconds": seconds, "rate": rate, "work_cpu_seconds": _cpu() - cpu, "peak_mb": _peak_mb(),
            "extra_mb": _peak_mb() - before}


CHILD_TASKS = {"floor_decode": floor_decode, "floor_alter": floor_alter, "floor_tokenize": floor_tokenize,
               "run": run, "embed": embed, "overlap": overlap}


def same_embeddings(new_cache, old_cache) -> bool:
    """Whether the two runs' caches hold the same item sets with bit-identical embeddings."""
    new = {path.relative_to(new_cache): path for path in Path(new_cache).glob("embeddings/*/*/embeddings.npy")}
    old = {path.relative_to(old_cache): path for path in Path(old_cache).glob("embeddings/*/*/embeddings.npy")}
    return bool(new) and new.keys() == old.keys() and all(
        np.array_equal(np.load(new[key]), np.load(old[key])) for key in new)


def committed_package(revision: str = "HEAD") -> Path:
    """The ``rococo_eval`` package and the metric ``rococo_recall.py`` as committed at ``revision``, extracted into a
    temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="rococo-bench-old-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "rococo_eval", "rococo_recall.py"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def clip_vocabulary():
    """OpenAI CLIP's BPE vocabulary and merges, from the file open_clip ships (as ``CLIPTokenizer`` reads them)."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        raise SystemExit("open_clip_torch is not installed: its bpe_simple_vocab_16e6.txt.gz is the CLIP vocabulary")
    bpe = Path(spec.origin).parent / "bpe_simple_vocab_16e6.txt.gz"
    merges = gzip.open(bpe).read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
    tokens = _byte_characters()
    tokens = tokens + [token + "</w>" for token in tokens] + ["".join(m.split()) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(tokens)}, merges


def _byte_characters() -> list:
    """GPT-2's and CLIP's printable stand-ins for the 256 byte values, in CLIP's vocabulary order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(code) for code in codes]


def make_tiny_clip(folder: Path) -> Path:
    """A random CLIP with 224 x 224 input and one narrow layer, the real CLIP tokenizer and image processor."""
    if (folder / "done").is_file():
        return folder
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocabulary, merges = clip_vocabulary()
    (folder / "vocab.json").write_text(json.dumps(vocabulary))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tokenizer = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    layers = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.CLIPConfig(
        text_config=dict(layers, vocab_size=len(vocabulary), max_position_embeddings=77),
        vision_config=dict(layers, image_size=IMAGE_SIZE, patch_size=32), projection_dim=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.CLIPModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.CLIPImageProcessor().save_pretrained(folder)  # CLIP's: shortest edge 224, centre crop 224
    (folder / "done").touch()
    return folder


def make_coco_root(root: Path, realistic: int) -> Path:
    """The 5,000 test images as synthetic COCO-like JPEGs under ``root/val2014``, made once."""
    if (root / "done").is_file():
        return root
    from rococo_eval.data.annotations import read_annotation_file

    names = [record["image"] for record in read_annotation_file("clean")]
    (root / "val2014").mkdir(parents=True, exist_ok=True)

    def make(index):
        rng = np.random.default_rng(index)
        width, height = (640, 480) if index % 4 else (480, 640)
        if index >= realistic:
            width, height = 32, 24
        coarse = rng.integers(0, 256, (height // 40 + 2, width // 40 + 2, 3), dtype=np.uint8)
        smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
        grain = rng.integers(-12, 13, (height, width, 3), dtype=np.int16)
        image = Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8))
        image = image.convert("L") if index % 50 == 0 else image
        image.save(root / names[index], quality=90)

    with ThreadPoolExecutor(CPUS) as pool:
        list(pool.map(make, range(len(names))))
    (root / "done").touch()
    return root


if __name__ == "__main__":
    main()
