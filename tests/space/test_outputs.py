"""rococo_eval.space.outputs through the Space's handlers: the synthetic example's files are shared by every click, and
what all requests keep stays within one byte budget (test_app.py drives the same through the served app)."""

import os
import time
from pathlib import Path

import gradio as gr
import pytest

from helpers.space_app import DECIDING_CAPTIONS, TinySource, disk_use, example_upload
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.space.handlers import Handlers
from rococo_eval.space.outputs import BUDGET_ENV, LIVE_S


def report_folder(answer) -> Path:
    """The folder of an evaluation's report (its download)."""
    return Path(answer.download).parent


def test_example_clicks_share_their_files(tmp_path):
    """Issue 40: each click wrote the example's score files and its outputs anew (22 MB at RoCOCO's size, kept for an
    hour); now four clicks, each with its flipped queries, hold what one does."""
    source = TinySource(DECIDING_CAPTIONS)
    root = tmp_path / "outputs"
    handlers = Handlers(GalleryFacts.of(source), root)
    used = []
    for _ in range(4):
        answer = handlers.example()
        handlers.first_flipped(answer.failures)
        used.append(disk_use(root))
    assert used == [used[0]] * 4
    example_files = tmp_path / "example"
    example_upload(source, example_files, 0)
    flipped_folder = Path(handlers.first_flipped(answer.failures).csv).parent
    # the example's score files, its report and its flipped queries, once
    assert used[0] == disk_use(example_files) + disk_use(report_folder(answer)) + disk_use(flipped_folder)
    assert len(list(root.rglob("*.npz"))) == len(list(example_files.iterdir()))


def test_files_removed_from_the_output_folder_are_written_again(tmp_path):
    """The example's score files and a report shared by clicks, removed by hand: the next click writes them again."""
    source = TinySource(DECIDING_CAPTIONS)
    handlers = Handlers(GalleryFacts.of(source), tmp_path / "outputs")
    first = handlers.example()
    for path in [*(tmp_path / "outputs").rglob("*.npz"), Path(first.download)]:
        path.unlink()
    again = handlers.example()
    assert again.results.equals(first.results) and again.download == first.download
    assert Path(again.download).is_file()


def test_over_the_budget_the_oldest_folders_go_first_and_live_ones_never(tmp_path, monkeypatch):
    """Issue 40: the output folder grew without bound for an hour. Over ``$ROCOCO_SPACE_OUTPUT_MB`` the folders used
    longest ago are removed; folders of the last minute are kept, and the new request is refused instead."""
    source = TinySource(DECIDING_CAPTIONS)
    uploads = [example_upload(source, tmp_path / f"seed{seed}", seed) for seed in (1, 2, 3)]
    probe = Handlers(GalleryFacts.of(source), tmp_path / "probe")
    budget = int(2.5 * disk_use(report_folder(probe.evaluate(*uploads[0]))))  # two evaluations fit, not three
    monkeypatch.setenv(BUDGET_ENV, str(budget / 2**20))
    root = tmp_path / "outputs"
    handlers = Handlers(GalleryFacts.of(source), root)
    first, second = (report_folder(handlers.evaluate(*upload)) for upload in uploads[:2])
    with pytest.raises(gr.Error, match=rf"the Space's output folder is full: this request's files \(\d+\.\d KB\) and "
                                       rf"those kept for the requests of the last {LIVE_S} s and for everyone "
                                       rf"\(\d+\.\d KB\) would exceed its budget of \d+\.\d KB \(\${BUDGET_ENV}\); "
                                       "try again"):
        handlers.evaluate(*uploads[2])
    assert first.is_dir() and second.is_dir() and disk_use(root) <= budget
    now = time.time()
    for folder, age in ((first, 300), (second, 200)):
        os.utime(folder, (now - age, now - age))
    third = report_folder(handlers.evaluate(*uploads[2]))
    assert not first.exists() and second.is_dir() and third.is_dir()
    assert disk_use(root) <= budget


@pytest.mark.parametrize("value", ["lots", "0", "-5", "inf", "nan"])
def test_a_budget_that_is_no_positive_number_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv(BUDGET_ENV, value)
    with pytest.raises(ValueError, match=rf"\${BUDGET_ENV} must be a (positive )?number of megabytes, got '{value}'"):
        Handlers(NO_SOURCE, tmp_path)
