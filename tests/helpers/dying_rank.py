"""``rococo-eval`` with a rank that dies, and a count of what each process computed: run it under torchrun.

    torchrun --nproc-per-node 2 tests/helpers/dying_rank.py [--die RANK:WHAT:N:HOW] [--count FILE] -- run ARGS...

The models are the real ones (:func:`rococo_eval.models.adapters.load_model`). Each process counts the rows its
model encodes and the ITM pairs it matches; with ``--count`` it writes them, as one JSON line per process, when
it ends. With ``--die``, rank ``RANK`` dies at its ``N``-th call (from 1) of WHAT, ``encode`` (any ``encode_``
method) or ``match`` (ITM): ``kill`` sends itself SIGKILL (the process dies as an out-of-memory kill or a lost
node would: nothing is cleaned up), ``raise`` raises a ``RuntimeError`` there.
"""

import argparse
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rococo_eval import cli  # noqa: E402
from rococo_eval.models import adapters  # noqa: E402

CALLS = ("encode_preprocessed", "encode_tokenized", "encode_images", "encode_texts", "match")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--die", help="RANK:WHAT:N:HOW: WHAT encode or match, HOW kill or raise")
    parser.add_argument("--count", help="a file that each process appends its counts to")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    die_rank, die_what, die_call, how = (args.die.split(":") if args.die else ("-1", "", "0", "kill"))
    counts = {"rank": rank, "encode": 0, "match": 0, "rows": 0, "pairs": 0}
    load_model = adapters.load_model

    def counted(name, method):
        what = "match" if name == "match" else "encode"

        def call(*arguments):
            counts[what] += 1
            if rank == int(die_rank) and what == die_what and counts[what] == int(die_call):
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"rank {rank} stopped at its {what} call {counts[what]}")
            result = method(*arguments)
            counts["pairs" if name == "match" else "rows"] += len(result)
            return result
        return call

    def load(*arguments, **options):
        model = load_model(*arguments, **options)
        for name in CALLS:
            if hasattr(model, name):
                setattr(model, name, counted(name, getattr(model, name)))
        return model

    adapters.load_model = load
    try:
        return cli.main(args.command[1:] if args.command[:1] == ["--"] else args.command)
    finally:
        if args.count:
            with open(args.count, "a") as handle:
                handle.write(json.dumps(counts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
