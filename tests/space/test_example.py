"""rococo_eval.space.example: the synthetic model's files, made from a source's layouts and scored by the Space's own
planner and metric (no gradio here: test_app.py and test_browser.py press the button)."""

import hashlib

import numpy as np
import pytest

from helpers.space_app import DECIDING_CAPTIONS, TinySource
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.io.scorefiles import read_header, read_top_k
from rococo_eval.space import logic
from rococo_eval.space.example import SYNTHETIC_MODEL, example_galleries, write_example


def _digests(example):
    return [hashlib.sha256(path.read_bytes()).hexdigest() for path in example.files]


def test_the_same_seed_writes_the_same_files(tmp_path):
    source = TinySource(DECIDING_CAPTIONS)
    folders = [tmp_path / name for name in ("first", "again", "other")]
    for folder in folders:
        folder.mkdir()
    facts = GalleryFacts.of(source)
    first, again = write_example(facts, folders[0]), write_example(facts, folders[1])
    assert _digests(first) == _digests(again)
    assert _digests(write_example(facts, folders[2], seed=1)) != _digests(first)
    assert first.model == SYNTHETIC_MODEL


def test_each_file_has_its_gallery_shape_and_lists_every_correct_item(tmp_path):
    source = TinySource(DECIDING_CAPTIONS)
    example = write_example(GalleryFacts.of(source), tmp_path)
    assert [tuple(row[1:4]) for row in example.layouts] == [(attack, direction, "official")
                                                             for attack, direction in example_galleries(source)]
    for path, (attack, direction) in zip(example.files, example_galleries(source)):
        layout = source.gallery(attack, direction, "official")
        assert read_header(path).shape == (layout.num_queries, layout.num_gallery), path.name
        top = read_top_k(path)
        for query in (0, layout.num_queries // 2, layout.num_queries - 1):
            assert set(layout.references[query]) <= set(top.top_columns[query].tolist()), (path.name, query)
        assert top.fill < top.top_scores.min()  # every item not listed ranks below every listed one


def test_the_example_shows_every_output_and_its_files_agree(tmp_path):
    """Scored as an upload: every gallery, flips in each attacked one, a by-word table, both image methods, and the
    clean R@1 of every attacked gallery equal to its clean gallery's (one model's files)."""
    source = TinySource(DECIDING_CAPTIONS)
    facts = GalleryFacts.of(source)
    example = write_example(facts, tmp_path)
    evaluation = logic.evaluate_files([str(path) for path in example.files], example.layouts, facts=facts)
    assert len(evaluation.results) == 6 and "Not scored" not in evaluation.message
    rows = {(row["attack"], row["direction"]): row for row in evaluation.rows}
    for (attack, direction), row in rows.items():
        if attack != "clean":
            assert row["clean_recall@1"] == rows["clean", direction]["recall@1"], attack
            assert 0 < row["recall@1"] < row["clean_recall@1"], attack
    assert 50 < rows["clean", "image_to_text"]["recall@1"] < 95
    view = logic.flipped_view(evaluation.failures, facts)
    assert len(evaluation.failures.attacked()) == 4 and view.rows
    assert view.words and {row[0] for row in view.words} == {"same_concept", "diff_concept"}
    assert {row[0] for row in view.image_attacks} >= {"mix", "patch"}


def test_without_annotations_the_example_says_why(tmp_path):
    with pytest.raises(ValueError, match="the synthetic example scores this Space's galleries, whose layouts come "
                                         "from the RoCOCO annotation files, and they are not available here"):
        write_example(NO_SOURCE, tmp_path)


def test_at_rococo_scale_the_files_are_small(annotations_dir, tmp_path):
    """RoCOCO's 5,000 images: six compact files of a few MB in all, of RoCOCO's shapes."""
    from rococo_eval.data.source import RococoSource

    source = RococoSource(annotations_dir)
    example = write_example(GalleryFacts.of(source), tmp_path)
    shapes = [read_header(path).shape for path in example.files]
    assert shapes == [(5000, 25010), (5000, 50010), (5000, 50010), (25010, 5000), (25010, 10000), (25010, 10000)]
    assert sum(path.stat().st_size for path in example.files) < 20 * 2**20
    top = read_top_k(example.files[1])
    assert np.isin(np.flatnonzero(source.gallery("same_concept", order="official").adversarial)[:5],
                   top.top_columns[0]).all()  # image 0's own adversarial captions are listed
