"""The leaderboard's start-up from its dataset repo: a Space on an empty disk downloads ``--records`` records from a
fake Hub on 127.0.0.1 (``tests/helpers/fake_hub.py``, which speaks the endpoints huggingface_hub uses), checks each
(digest, galleries, shapes, summary numbers against the bit vectors) and rebuilds its SQLite cache.

    python benchmarks/bench_leaderboard.py [--records 1000] [--galleries 12]

Each record holds RoCOCO's real shapes (5,000 images, 25,010 captions) for the first ``--galleries`` galleries, with
drawn per-query outcomes. Printed: the seconds from an empty disk to a served board (the goal of issue 41: under
10 s with 1,000 records), split into the download and the check-and-cache step, and a second start on the same disk
(nothing to download).
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers.fake_hub import FakeHub  # noqa: E402

from rococo_eval.space.hub_records import HubRecords  # noqa: E402
from rococo_eval.space.leaderboard import Leaderboard, rococo_galleries  # noqa: E402
from rococo_eval.space.records import make_record, record_bytes, record_path  # noqa: E402

CAPTIONS = [5] * 4990 + [6] * 10  # RoCOCO: 5,000 images, 25,010 captions


def record(galleries: dict, rng) -> dict:
    """A record of every gallery in ``galleries``, its outcomes drawn with ``rng`` and its numbers theirs."""
    rows, outcomes = [], {}
    for key, (queries, items) in galleries.items():
        attack, direction = key.split("/")
        hit = rng.random(queries) < 0.6
        rows.append({"attack": attack, "direction": direction, "recall@1": 100.0 * hit.sum() / queries,
                     "num_queries": queries, "num_gallery": items, "reranked": True})  # no agreement to draw
        outcomes[key] = {"hit": hit}
    return make_record(rows, outcomes, model=f"model {rng.integers(1 << 62)}", link="", precision="fp32", note="",
                       submitted_at="2025-06-01T10:00:00+00:00")


def start(folder: Path, hub: FakeHub, galleries: dict) -> tuple[Leaderboard, float]:
    started = time.perf_counter()
    records = HubRecords("org/board", folder / "board.sqlite3.hub", endpoint=hub.url, timeout_s=300)
    board = Leaderboard(folder / "board.sqlite3", records, galleries=galleries)
    records.start(board)
    records.close()
    return board, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--galleries", type=int, default=12)
    args = parser.parse_args(argv)
    galleries = dict(list(rococo_galleries(CAPTIONS).items())[:args.galleries])
    rng = np.random.default_rng(0)
    hub = FakeHub()
    made = [record(galleries, rng) for _ in range(args.records)]
    hub.files["org/board"] = {record_path(one): record_bytes(one) for one in made}
    size = sum(len(data) for data in hub.files["org/board"].values())
    print(f"{args.records} records of {len(galleries)} galleries, {size / 1e6:.1f} MB in the fake Hub")
    try:
        with tempfile.TemporaryDirectory() as folder:
            board, seconds = start(Path(folder), hub, galleries)
            rows = len(board.rows(kind="submitted"))
            print(f"start on an empty disk: {seconds:.2f} s ({rows} rows; goal: under 10 s)")
            _, again = start(Path(folder), hub, galleries)
            print(f"start again on the same disk: {again:.2f} s")
    finally:
        hub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
