"""rococo_eval.io.savedscores: a saved gallery's file name and shape give its gallery back in the official order, and
a matrix written block by block appears at its path only when every row is written."""

import numpy as np
import pytest

from rococo_eval.catalog import ATTACKS, galleries
from rococo_eval.detection import choose_layout
from rococo_eval.io.savedscores import ScoreMatrixWriter, score_file_name
from rococo_eval.layout import gallery_shape

TINY = [5, 6, 5]


@pytest.mark.parametrize("attack, direction", galleries(ATTACKS))
def test_the_file_name_and_the_shape_give_the_gallery_in_the_official_order(attack, direction):
    """What `rococo-eval score DIR/*.npy` relies on: no order to guess, also for attacked image-to-text galleries."""
    choice = choose_layout(gallery_shape(attack, direction, TINY), TINY, score_file_name(attack, direction))
    assert (choice.attack, choice.direction, choice.order) == (attack, direction, "official")


def test_the_matrix_is_written_block_by_block_as_float32(tmp_path):
    path = tmp_path / score_file_name("rand_voca", "image_to_text")
    rows = np.random.default_rng(0).standard_normal((5, 4))
    with ScoreMatrixWriter(path, (5, 4)) as scores:
        for start, stop in ((0, 2), (2, 3), (3, 5)):
            scores.write(start, rows[start:stop])
            assert not path.exists()
    saved = np.load(path)
    assert saved.dtype == np.float32 and np.array_equal(saved, rows.astype(np.float32))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("start, rows, got", [
    (1, np.zeros((2, 4)), r"got shape \(2, 4\) at row 1"),  # a gap
    (0, np.zeros((2, 3)), r"got shape \(2, 3\) at row 0"),  # another width
    (0, np.zeros(4), r"got shape \(4,\) at row 0"),         # not a block of rows
])
def test_a_block_out_of_place_is_refused_and_nothing_is_left(tmp_path, start, rows, got):
    with pytest.raises(ValueError, match=r"`rows` must continue s\.npy at row 0 with 4 columns, " + got):
        with ScoreMatrixWriter(tmp_path / "s.npy", (3, 4)) as scores:
            scores.write(start, rows)
    assert list(tmp_path.iterdir()) == []


def test_rows_never_written_are_an_error_and_leave_no_file(tmp_path):
    with pytest.raises(ValueError, match=r"^s\.npy: 2 of 3 rows written$"):
        with ScoreMatrixWriter(tmp_path / "s.npy", (3, 4)) as scores:
            scores.write(0, np.ones((2, 4)))
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_write_keeps_the_file_saved_before(tmp_path):
    path = tmp_path / "s.npy"
    before = np.full((3, 4), 7.0, dtype=np.float32)
    np.save(path, before)
    with pytest.raises(KeyboardInterrupt):
        with ScoreMatrixWriter(path, (3, 4)) as scores:
            scores.write(0, np.ones((1, 4)))
            raise KeyboardInterrupt
    assert np.array_equal(np.load(path), before)
    assert [p.name for p in tmp_path.iterdir()] == ["s.npy"]
