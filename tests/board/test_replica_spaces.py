"""Two replicas of the Space, each in its own process (tests/helpers/replica_space.py, app.py's app), against one
fake Hub on 127.0.0.1: both submissions of the same moment become records, and both boards show both rows."""

import concurrent.futures
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from gradio_client import Client, handle_file

import app
from helpers import REPO_ROOT
from helpers.space_app import CAPTIONS, free_port, wait_until_served
from rococo_eval.layout import gallery_layout
from rococo_recall import rococo_recall

REPO = "org/board"


def replica(folder, hub):
    """A Space process on a free port (its database in ``folder``, its records in ``hub``); returns it and its URL
    once the page answers."""
    port = free_port()
    folder.mkdir()
    env = {**os.environ, "ROCOCO_LEADERBOARD_REPO": REPO, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
           "ROCOCO_LEADERBOARD_REFRESH_S": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "GRADIO_TEMP_DIR": str(folder / "gradio"), "TMPDIR": str(folder)}  # a terminated app leaves its folders
    log = open(folder / "space.log", "w+")
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "tests" / "helpers" / "replica_space.py"), str(port),
                                str(folder)], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    process.log = log
    return process, f"http://127.0.0.1:{port}/"


def evaluate_and_submit(url, folder, seed):
    """Evaluate a clean image-to-text file of a model drawn with ``seed`` and submit it as ``replica <seed>``;
    return the submission's message and the file's R@1."""
    layout = gallery_layout("clean", "image_to_text", CAPTIONS)
    scores = np.random.default_rng(seed).standard_normal((layout.num_queries, layout.num_gallery)).astype("f4")
    for query, correct in enumerate(layout.references):
        scores[query, correct[0]] += 1.5
    path = folder / "clean.npy"
    np.save(path, scores)
    client = Client(url, verbose=False)
    client.predict([handle_file(path)], {"headers": app.LAYOUT_HEADERS, "data": [["clean.npy", "", "", "", ""]]},
                   api_name="/evaluate")
    message, _ = client.predict(f"replica {seed}", "", "fp32", "", "", "all", api_name="/submit")
    return message, rococo_recall(scores, **layout.metric_inputs())["recall@1"]


def board_of(url):
    """The replicas' rows on the board at ``url``: model, whether it is pending, clean R@1."""
    table = Client(url, verbose=False).predict("replica", "submitted", api_name="/leaderboard")
    column = table["headers"].index
    return [(row[column("model")], "pending" in row[column("kind")], row[column("clean i2t")])
            for row in table["data"]]


@pytest.mark.slow
def test_two_space_processes_submitting_at_once_both_land_and_both_boards_converge(tmp_path, fake_hub):
    replicas = [replica(tmp_path / name, fake_hub) for name in ("one", "two")]
    try:
        for process, url in replicas:
            wait_until_served(process, url, process.log, "a replica")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(evaluate_and_submit, [url for _, url in replicas],
                                    [tmp_path / name for name in ("one", "two")], [1, 2]))
        for seed, (message, _) in enumerate(answers, start=1):
            assert message.startswith(f"added replica {seed} to the board (pending until its record is in the "
                                      "dataset repo)"), message
        expected = [(f"replica {seed}", False, round(recall, 4)) for seed, (_, recall) in enumerate(answers, 1)]
        deadline = time.monotonic() + 90
        while (sorted(board_of(replicas[0][1])) != expected or sorted(board_of(replicas[1][1])) != expected) \
                and time.monotonic() < deadline:
            time.sleep(0.5)  # each replica's record lands, then the other's timed refresh brings it
        assert sorted(board_of(replicas[0][1])) == sorted(board_of(replicas[1][1])) == expected
        records = sorted(path for path in fake_hub.files[REPO] if path.startswith("submissions/"))
        assert len(records) == 2 and fake_hub.commit_count == 2  # one record each, committed once
    finally:
        for process, _ in replicas:
            process.terminate()
            process.wait(timeout=30)
            process.log.close()
