"""``rococo-eval leaderboard migrate`` (rococo_eval.board.migration): the old board's ``leaderboard.jsonl`` in a
dataset repo becomes records once, said before it is done, against a fake Hub on 127.0.0.1 that stores every
commit's files; the command runs as a user runs it, in its own process, with ``$HF_ENDPOINT``."""

import json
import os
import subprocess
import sys

from rococo_eval.data.source import RococoSource
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.leaderboard import SUBMITTED, Leaderboard, rococo_galleries
from rococo_eval.board.migration import MIGRATED_WARNING

REPO = "org/board"
OLD_BOARD = [  # as the Space's HubCopy wrote it (Leaderboard.export_jsonl): published rows first, in the order they came
    {"kind": "published", "model": "BLIP (paper v5)", "link": "", "precision": "not stated", "note": "the abstract",
     "source": "Park et al.", "submitted_at": "published",
     "results": {"clean/image_to_text": 81.9, "text/image_to_text": 48.4}},
    {"kind": "submitted", "model": "old model", "link": "https://example.org/old", "precision": "fp16",
     "note": "from 2025", "source": "https://example.org/old", "submitted_at": "2025-03-01T09:00:00+00:00",
     "results": {"clean/image_to_text": 61.25, "rand_voca/image_to_text": 40.5}},
    {"kind": "submitted", "model": "other model", "link": "", "precision": "fp32", "note": "",
     "source": "submitted in the Space", "submitted_at": "2025-04-02T10:30:00+00:00",
     "results": {"clean/text_to_image": 45.0, "mix_seed1/text_to_image": 30.0}},
]


def migrate(fake_hub, *options) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": fake_hub.url, "HF_TOKEN": "hf_a_write_token", "HF_HUB_OFFLINE": "0"}
    return subprocess.run([sys.executable, "-m", "rococo_eval", "leaderboard", "migrate", "--repo", REPO, *options],
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_old_board_becomes_records_once_said_first_and_never_twice(tmp_path, fake_hub):
    lines = "".join(json.dumps(line, sort_keys=True) + "\n" for line in OLD_BOARD)
    fake_hub.files[REPO] = {"leaderboard.jsonl": lines.encode()}

    planned = migrate(fake_hub, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("leaderboard.jsonl of org/board: 2 row(s) to turn into records, 0 that are "
                                     "records already, 1 published (left out: the code holds them)\n")
    assert "old model  (2025-03-01T09:00:00+00:00)" in planned.stdout and "nothing committed (--dry-run)" in planned.stdout
    assert list(fake_hub.files[REPO]) == ["leaderboard.jsonl"] and fake_hub.commit_count == 0

    done = migrate(fake_hub)
    assert done.returncode == 0, done.stderr
    assert "committed 2 record(s)" in done.stdout and fake_hub.commit_count == 1
    records = sorted(path for path in fake_hub.files[REPO] if path.startswith("submissions/2025/"))
    assert len(records) == 2 and "leaderboard.jsonl" in fake_hub.files[REPO]  # the old file stays

    # a Space on a new disk shows the migrated rows, with their numbers and what they lack
    galleries = rococo_galleries(RococoSource().captions_per_image)
    hub = HubRecords(REPO, tmp_path / "board.sqlite3.hub", endpoint=fake_hub.url, timeout_s=30)
    board = Leaderboard(tmp_path / "board.sqlite3", hub, galleries=galleries)
    hub.start(board)
    hub.close()
    assert hub.skipped == []
    rows = {row["model"]: row for row in board.rows(kind=SUBMITTED)}
    assert sorted(rows) == ["old model", "other model"]
    assert (rows["old model"]["clean R@1 (i2t)"], rows["old model"]["rand_voca R@1"]) == (61.25, 40.5)
    assert (rows["old model"]["precision"], rows["old model"]["link"]) == ("fp16", "https://example.org/old")
    assert rows["other model"]["clean R@1 (t2i)"] == 45.0 and not rows["other model"]["pending"]
    assert rows["old model"]["warnings"] == [MIGRATED_WARNING]
    assert board.outcomes() == {}  # no per-query outcomes: not compared query by query

    again = migrate(fake_hub)
    assert again.returncode == 1
    assert "2 row(s) of leaderboard.jsonl are records already (was it migrated before?): nothing was committed; " \
           "pass --skip-existing" in again.stderr
    assert "line 2: old model is a record already" in again.stdout and fake_hub.commit_count == 1
    skipped = migrate(fake_hub, "--skip-existing")
    assert skipped.returncode == 0 and "nothing committed: no row to migrate" in skipped.stdout
    assert fake_hub.commit_count == 1


def test_a_damaged_old_board_is_refused_by_line_and_nothing_is_committed(fake_hub):
    lines = [json.dumps(OLD_BOARD[1]), json.dumps({**OLD_BOARD[2], "results": {"custom/image_to_text": 50.0}})]
    fake_hub.files[REPO] = {"leaderboard.jsonl": "\n".join(lines).encode()}
    refused = migrate(fake_hub)
    assert refused.returncode == 1
    assert ("leaderboard.jsonl line 2 ('other model'): custom/image_to_text is not a RoCOCO gallery"
            in refused.stderr)
    fake_hub.files[REPO] = {"leaderboard.jsonl": b'{"kind": "submitted", "model": "cut'}
    assert "leaderboard.jsonl line 1 is not JSON" in migrate(fake_hub).stderr
    fake_hub.files[REPO] = {}
    assert "the dataset repo org/board holds no leaderboard.jsonl" in migrate(fake_hub).stderr
    assert fake_hub.commit_count == 0
