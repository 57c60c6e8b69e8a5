"""Walk one ``rococo-eval run --model`` through the package's modules, and count its stays, rooms and climbs back.

    python tools/walk.py [--work DIR] [--model NAME] [--depth N] [--show]

It runs ``rococo-eval run`` of a tiny random CLIP (the tests' helpers; or ``--model NAME``) on a benchmark generated
from a 12-image set (made in ``--work``, default ``/tmp/rococo-walk``, once), with :func:`sys.setprofile` tracing the
calls of the main thread from ``rococo_eval/cli.py:_run_model`` down, and prints the figures (``--show``: the walk).

The definitions:

- **call tree**: the calls of ``rococo_eval`` functions made below ``_run_model``; a call's parent is the nearest
  ``rococo_eval`` function under it on the stack (library frames between them, torch's ``Module.__call__``, are
  looked through). Module bodies run by an import, and what they call, are left out. Of the calls of one function
  from one parent only the first is kept, and later ones add to its subtree: a loop's second turn walks the path of
  its first, so the walk does not grow with the data. Threads other than the main one are not traced.
- **room**: a function's module (``models/cache`` for ``rococo_eval.models.cache``).
- **walk**: the call tree visited depth first; it stands in the caller's room when it makes a call, then in the
  callee's. Each step is entered by a call, or by a return when a caller makes its next call after a callee (in
  another room) came back.
- **depth**: the walk goes down ``--depth`` rooms below ``cli`` (a call within one room goes no deeper; default 2:
  the spine, the rooms ``_run_model`` calls into and those they call into, where the front end's doors are); the
  figures of the whole tree are printed too.
- **stay**: a maximal run of consecutive steps of the walk in one room.
- **climb back**: a stay entered by a return: the walk goes back up into a room it left earlier, to go on from there.

The figures are counts of these: stays, distinct rooms, climbs back. Seeded and offline, so two runs of one tree
agree.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PACKAGE = "rococo_eval"
START = ("rococo_eval.cli", "_run_model")


class Call:
    """A node of the call tree: a function (its code) in its room, and its children in the order first called."""

    def __init__(self, code, room: str):
        self.code, self.room = code, room
        self.children: dict = {}

    def child(self, code, room: str) -> "Call":
        if code not in self.children:
            self.children[code] = Call(code, room)
        return self.children[code]


class Tracer:
    """The profile function that builds the call tree below :data:`START` (see the module's docstring)."""

    def __init__(self):
        self.root = None
        self.frames: dict = {}  # a live frame of the tree's -> its node

    def __call__(self, frame, event, arg):
        if event == "return":
            self.frames.pop(frame, None)
            return
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        code = frame.f_code
        if not module.startswith(PACKAGE) or code.co_name == "<module>":
            return
        parent = self._parent_of(frame)
        if parent is None:
            if (module, code.co_name) == START and self.root is None:
                self.root = self.frames[frame] = Call(code, _room(module))
            return
        self.frames[frame] = parent.child(code, _room(module))

    def _parent_of(self, frame):
        caller = frame.f_back
        while caller is not None:
            if caller in self.frames:
                return self.frames[caller]
            if caller.f_code.co_name == "<module>":
                return None  # called by an import: not part of the walk
            caller = caller.f_back
        return None


def _room(module: str) -> str:
    return module[len(PACKAGE) + 1:].replace(".", "/") or PACKAGE


def walk(root: Call, depth: int) -> list[tuple[str, str, str]]:
    """The steps of the walk of ``root``'s tree down to ``depth`` rooms below it: ``(room, how entered: "start",
    "call" or "return", function)``."""
    steps = [(root.room, "start", root.code.co_name)]

    def visit(node: Call, level: int) -> None:
        for child in node.children.values():
            below = level + (child.room != node.room)
            if below > depth:
                continue
            if steps[-1][0] != node.room:
                steps.append((node.room, "return", node.code.co_name))
            steps.append((child.room, "call", child.code.co_name))
            visit(child, below)

    visit(root, 0)
    return steps


def stays(steps) -> list[tuple[str, str]]:
    """The stays of ``steps``: ``(room, how entered)`` of each maximal run in one room."""
    found = []
    for room, how, _ in steps:
        if not found or found[-1][0] != room:
            found.append((room, how))
    return found


def figures(steps) -> dict:
    """``{"stays", "rooms", "climbs"}`` of a walk."""
    runs = stays(steps)
    return {"stays": len(runs), "rooms": len({room for room, _ in runs}),
            "climbs": sum(how == "return" for _, how in runs)}


def _inputs(work: Path) -> tuple[str, Path]:
    """A tiny random CLIP and a benchmark of 12 images in ``work`` (made once)."""
    from PIL import Image

    from helpers.image_text_set import captions_of
    from helpers.tiny_models import make_tiny_hf_clip
    from rococo_eval.data.benchmark import make_benchmark

    benchmark = work / "benchmark"
    if not (work / "done").exists():
        shutil.rmtree(work, ignore_errors=True)
        (work / "image_set" / "images").mkdir(parents=True)
        records = []
        for i in range(12):
            pixels = np.random.default_rng(i).integers(0, 256, (40 + i, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(work / "image_set" / "images" / f"{i:03d}.png")
            records.append({"image": f"images/{i:03d}.png", "caption": captions_of(i)})
        (work / "image_set" / "set.json").write_text(json.dumps(records))
        make_benchmark(work / "image_set" / "set.json", benchmark, seeds=[1, 7], cache_dir=work / "attack-cache")
        (work / "clip").mkdir()
        (work / "model").write_text(make_tiny_hf_clip(work / "clip"))
        (work / "done").touch()
    return (work / "model").read_text(), benchmark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/rococo-walk"), help="where the inputs are made")
    parser.add_argument("--model", help="the model to run (default: a tiny random CLIP made in --work)")
    parser.add_argument("--depth", type=int, default=2,
                        help="how many rooms below cli the walk goes (default 2: the rooms _run_model calls into, "
                             "and those they call into); the figures of the whole tree follow")
    parser.add_argument("--show", action="store_true", help="print every stay of the walk (to --depth)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model, benchmark = _inputs(args.work)
    from rococo_eval.cli import main as cli

    tracer = Tracer()
    with tempfile.TemporaryDirectory() as scratch:
        arguments = ["run", "--model", args.model or model, "--benchmark", str(benchmark), "--batch-size", "4",
                     "--workers", "0", "--quiet", "--cache-dir", f"{scratch}/cache", "--out", f"{scratch}/report"]
        sys.setprofile(tracer)
        try:
            status = cli(arguments)
        finally:
            sys.setprofile(None)
    if status != 0 or tracer.root is None:
        raise SystemExit(f"rococo-eval {' '.join(arguments)} exited with {status}")
    steps = walk(tracer.root, args.depth)
    if args.show:
        previous = None
        for room, how, function in steps:
            if room != previous:
                print(f"{'  ^ ' if how == 'return' else '    '}{room}  ({function})")
            previous = room
    for depth, counts in ((args.depth, figures(steps)), ("any", figures(walk(tracer.root, sys.maxsize)))):
        print(f"depth {depth}: {counts['stays']} stays in {counts['rooms']} rooms with {counts['climbs']} climbs back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
