"""One replica of the Space in its own process: ``python tests/helpers/replica_space.py PORT FOLDER`` serves app.py's
app on the tests' tiny RoCOCO-like source (:class:`helpers.space_app.TinySource`) on 127.0.0.1:PORT, with its
leaderboard database and outputs in FOLDER and its records in the dataset repo that the environment names
(``$ROCOCO_LEADERBOARD_REPO`` on the Hub at ``$HF_ENDPOINT``), as a Space is configured. Two of them against one
fake Hub stand for two replicas of one Space."""

import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

from helpers.space_app import CAPTIONS, TinySource  # noqa: E402


def main(port: str, folder: str) -> None:
    folder = Path(folder)
    # app.py's own module-level app, never served: a local board of its own and no annotations to load
    saved = {name: os.environ.pop(name, None) for name in ("ROCOCO_LEADERBOARD_REPO", "ROCOCO_ANNOTATIONS_DIR")}
    os.environ.update(ROCOCO_LEADERBOARD_DB=str(folder / "unserved.sqlite3"),
                      ROCOCO_ANNOTATIONS_DIR=str(folder / "no-annotations"))
    import app

    del os.environ["ROCOCO_LEADERBOARD_DB"]
    os.environ.update({name: value for name, value in saved.items() if value is not None})
    demo = app.build_app(source=TinySource(CAPTIONS), output_dir=folder / "outputs",
                         leaderboard_db=folder / "board.sqlite3")
    demo.launch(server_name="127.0.0.1", server_port=int(port), quiet=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
