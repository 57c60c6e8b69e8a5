"""The board's rank bands and order, on rows whose per-query outcomes are planted: one pair of submissions
significantly different, one pair not; the published rows, without outcomes, not compared."""

import time

import numpy as np

from rococo_eval.catalog import TEXT_ATTACKS
from rococo_eval.reporting.significance import paired_difference
from rococo_eval.board.leaderboard import SUBMITTED, board_row, published_entries
from rococo_eval.board.ranking import RANK, TEXT_MEAN, rank_rows
from rococo_eval.space.views import BOARD_VIEWS, board_shown, board_table, coverage_note

IMAGES = 5000  # RoCOCO's image-to-text queries
TEXT = [f"{attack}/image_to_text" for attack in TEXT_ATTACKS]


def planted(hits_by_gallery, model):
    """A submitted board row with these per-query hits and the R@1 they give."""
    results = {key: round(100 * float(np.mean(hits)), 4) for key, hits in hits_by_gallery.items()}
    return board_row(results, hits_by_gallery, model=model, kind=SUBMITTED, link="", precision="fp32", note="",
                     source="submitted in the Space", submitted="2026-12-05T10:00:00+00:00")


def published_rows():
    import json

    return [board_row(json.loads(entry[-1]), model=entry[2], kind=entry[1], link=entry[3], precision=entry[4],
                      note=entry[5], source=entry[6], submitted=entry[7]) for entry in published_entries()]


def planted_board(seed=1):
    """Three submissions: strong, 4 points above middle on every text attack (significant); close, which wins 10
    queries of each attack that middle misses and misses 8 that middle wins, 0.04 points above middle (not)."""
    rng = np.random.default_rng(seed)
    middle = {key: rng.uniform(size=IMAGES) < 0.40 for key in TEXT}
    close = {key: hits.copy() for key, hits in middle.items()}
    strong = {key: hits.copy() for key, hits in middle.items()}
    for key in TEXT:
        flip = rng.choice(np.flatnonzero(~middle[key]), 200, replace=False)
        strong[key][flip] = True
        close[key][flip[:10]] = True
        close[key][rng.choice(np.flatnonzero(middle[key]), 8, replace=False)] = False
    return [planted(middle, "middle"), planted(close, "close"), planted(strong, "strong"), *published_rows()]


def test_planted_differences_give_the_bands():
    rows = {row["model"]: row for row in rank_rows(planted_board())}
    mean = {name: np.mean([rows[name]["outcomes"][key] for key in TEXT], axis=0) for name in ("strong", "close")}
    assert paired_difference(mean["strong"], mean["close"]).p_value < 1e-10
    mean["middle"] = np.mean([rows["middle"]["outcomes"][key] for key in TEXT], axis=0)
    assert paired_difference(mean["close"], mean["middle"]).p_value > 0.05
    assert [rows[name][RANK] for name in ("strong", "close", "middle")] == ["1", "2-3", "2-3"]
    assert {row[RANK] for name, row in rows.items() if row["kind"] != SUBMITTED} == {"n/a"}


def test_the_board_shows_the_band_beside_its_column_and_sorts_means_apart():
    ordered = rank_rows(planted_board())
    assert [row["model"] for row in ordered][:3] == ["strong", "close", "middle"]
    assert [row[TEXT_MEAN] for row in ordered[3:]] == [None] * 5  # published: no mean
    shown = board_table(ordered, "means")
    assert list(shown.columns).index("rank") == list(shown.columns).index("mean text") - 2
    assert shown["rank"].tolist() == ["1", "2-3", "2-3"] + ["n/a"] * 5
    assert shown["text attack, unnamed"].tolist()[3:] == [64.5, 48.4, 37.6, 37.5, 37.0]
    assert "rank" not in BOARD_VIEWS["image attacks"]  # the band is on mean text, which that view does not show
    assert board_shown(ordered, "all").data.shape == (8, len(BOARD_VIEWS["all"]))


def test_rows_without_outcomes_are_not_compared_and_the_rest_still_are():
    rows = planted_board()
    rows[1] = {**rows[1], "outcomes": None}  # close: submitted before outcomes were kept
    rows[0] = {**rows[0], "outcomes": {key: rows[0]["outcomes"][key] for key in TEXT[:3]}}  # middle: one missing
    ranked = {row["model"]: row[RANK] for row in rank_rows(rows)}
    assert (ranked["strong"], ranked["close"], ranked["middle"]) == ("1", "n/a", "n/a")


def test_every_band_of_a_200_row_board_takes_under_2_seconds():
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.3, 0.5, size=200)
    rows = [planted({key: rng.uniform(size=IMAGES) < rate for key in TEXT}, f"model {n}")
            for n, rate in enumerate(rates)]
    started = time.perf_counter()
    ranked = rank_rows(rows)
    assert time.perf_counter() - started < 2.0
    assert ranked[0][RANK].startswith("1") and len({row[RANK] for row in ranked}) > 5


def test_a_partial_submission_is_told_what_it_fills_and_why_a_mean_is_blank():
    results = {"clean/image_to_text": 50.0, "rand_voca/image_to_text": 37.5, "danger/image_to_text": 40.0,
               "mix_seed1/text_to_image": 20.0}
    assert coverage_note(results) == (
        "; on the board it fills clean i2t, rand voca, danger, mix 1; mean text is blank: a mean is over all four "
        "text attacks and this evaluation lacks same concept, diff concept; mean image is blank: a mean is over all "
        "six image attacks and this evaluation lacks mix 10, mix 100, patch 1, patch 10, patch 100")
    text_only = {**results, **{key: 30.0 for key in TEXT}}
    del text_only["mix_seed1/text_to_image"]
    assert coverage_note(text_only).endswith("mean image is blank: a mean is over all six image attacks and this "
                                             "evaluation has none of them")
    assert coverage_note({**text_only, **{f"{attack}/text_to_image": 20.0 for attack in
                                          ("mix_seed1", "mix_seed10", "mix_seed100", "patch_seed1", "patch_seed10",
                                           "patch_seed100")}}) == ""
