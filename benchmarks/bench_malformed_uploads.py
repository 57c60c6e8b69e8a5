"""The Space's memory under malformed uploads: the peak of the server while four users at once upload a
safetensors file with a 100 MB header (1.56 million entries around a 20 x 40 matrix), against four users uploading
the same 20 x 40 matrix in a well-formed file, in one run.

    python benchmarks/bench_malformed_uploads.py [--annotations DIR] [--rounds 2]

The Space runs as ``python app.py`` on a free loopback port (RoCOCO's annotations from ``--annotations``, default
``$ROCOCO_ANNOTATIONS_DIR``). Each round sends four concurrent ``/detect`` calls, then four concurrent
``/evaluate`` calls (layout: custom, as the matrix is no RoCOCO gallery), through gradio_client, first with the
well-formed file, then with the malformed one (after one well-formed warm-up round), while the server's resident memory is sampled every 20 ms. It prints,
for each, the server's memory before, its peak above that, the time, and the ratios malformed / well-formed.
Issue 29 measured the server going from 0.67 to 5.9 GB for 83 s under four such ``/detect`` calls.
"""

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.malformed import huge_header  # noqa: E402
from helpers.space_app import free_port  # noqa: E402

USERS = 4


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotations", default=os.environ.get("ROCOCO_ANNOTATIONS_DIR"),
                        help="the RoCOCO annotations folder (default $ROCOCO_ANNOTATIONS_DIR)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.annotations:
        parser.error("--annotations (or $ROCOCO_ANNOTATIONS_DIR) is needed: the Space serves RoCOCO")
    with tempfile.TemporaryDirectory(prefix="bench-malformed-") as folder:
        folder = Path(folder)
        good = folder / "good.safetensors"
        from safetensors.numpy import save_file

        save_file({"scores": np.random.default_rng(0).normal(size=(20, 40)).astype(np.float32),
                   "references": np.arange(20, dtype=np.int64), "adversarial": np.arange(20, 40, dtype=np.int64)},
                  str(good))
        bad = huge_header(folder / "bad.safetensors")
        print(f"files: well-formed {good.stat().st_size / 1e3:.1f} kB, malformed {bad.stat().st_size / 1e6:.1f} MB")
        server, url = _start(folder, args.annotations)
        try:
            figures = {"well-formed": [], "malformed": []}
            _round(url, server, good)  # warm-up: the first evaluation's imports and caches are not an upload's
            for _ in range(args.rounds):
                for kind, path in (("well-formed", good), ("malformed", bad)):
                    figures[kind].append(_round(url, server, path))
        finally:
            server.terminate()
            server.wait(timeout=30)
    for kind, rounds in figures.items():
        before, peak, seconds = (np.median([round_[i] for round_ in rounds]) for i in range(3))
        print(f"{kind:>11}: server {before / 2**20:.0f} MB before, peak +{peak / 2**20:.1f} MB, {seconds:.2f} s "
              f"for {USERS} /detect and {USERS} /evaluate at once (median of {len(rounds)} rounds)")
    good_peak, bad_peak = (max(np.median([round_[1] for round_ in figures[kind]]), 2**20)
                           for kind in ("well-formed", "malformed"))
    good_time, bad_time = (np.median([round_[2] for round_ in figures[kind]]) for kind in ("well-formed", "malformed"))
    print(f"malformed / well-formed: peak growth {bad_peak / good_peak:.2f}x, time {bad_time / good_time:.2f}x")
    return 0


def _start(folder: Path, annotations: str):
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "ROCOCO_ANNOTATIONS_DIR": annotations, "GRADIO_ANALYTICS_ENABLED": "False",
           "GRADIO_TEMP_DIR": str(folder / "gradio"), "ROCOCO_LEADERBOARD_DB": str(folder / "board.sqlite3")}
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return server, url
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"app.py did not start on {url}")
        time.sleep(0.5)


def _round(url: str, server: subprocess.Popen, path: Path) -> tuple[int, int, float]:
    """(memory before, peak growth, seconds) of four users' /detect, then four users' /evaluate, of ``path``."""
    from gradio_client import Client, handle_file

    process = psutil.Process(server.pid)
    clients = [Client(url, verbose=False) for _ in range(USERS)]
    layout = {"headers": ["file", "attack", "direction", "order", "note"],
              "data": [[path.name, "custom", "image_to_text", "", ""]]}
    before, peak, done = process.memory_info().rss, [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.02)

    def detect(client):
        return client.predict([handle_file(path)], api_name="/detect")

    def evaluate(client):
        try:
            return client.predict([handle_file(path)], layout, api_name="/evaluate")
        except Exception as error:  # the malformed file is refused: its message is the answer
            return str(error)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(USERS) as pool:
        list(pool.map(detect, clients))
        answers = list(pool.map(evaluate, clients))
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if isinstance(answers[0], str):
        print(f"  {path.name}: {answers[0][:160]}")
    return before, max(peak[0] - before, 0), seconds


if __name__ == "__main__":
    sys.exit(main())
