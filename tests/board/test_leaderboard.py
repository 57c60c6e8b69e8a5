"""rococo_eval.board.leaderboard: the SQLite board survives a restart, starts with the published rows, keeps a
result once, and refuses what it cannot show safely."""

import datetime
import sqlite3

import pytest

from helpers import typed_rows
from rococo_eval.catalog import TEXT_ATTACKS, gallery_key
from rococo_eval.board.leaderboard import (
    COLUMNS,
    PUBLISHED,
    SUBMITTED,
    BoardUnavailable,
    Leaderboard,
    rate_allows,
    rococo_galleries,
)
from rococo_eval.board.ranking import RANK, TEXT_MEAN, TEXT_UNNAMED

GALLERIES = rococo_galleries([5] * 7 + [6])  # RoCOCO's layout on 8 images


def counted(rows):
    """``rows`` with the shapes of their galleries, as an evaluation's summary rows carry them."""
    return [{**row, **dict(zip(("num_queries", "num_gallery"), GALLERIES.get(gallery_key(row["attack"],
                                                                                         row["direction"]), ())))}
            for row in rows]


ROWS = counted([{"attack": "clean", "direction": "image_to_text", "recall@1": 51.0},
                {"attack": "clean", "direction": "text_to_image", "recall@1": 30.5},
                {"attack": "rand_voca", "direction": "image_to_text", "clean_recall@1": 51.0, "recall@1": 40.0},
                {"attack": "danger", "direction": "image_to_text", "clean_recall@1": 51.0, "recall@1": 44.0},
                {"attack": "mix_seed1", "direction": "text_to_image", "clean_recall@1": 30.5, "recall@1": 20.0},
                {"attack": "mix", "direction": "text_to_image", "seeds": (1, 10), "recall@1": 21.0}])


def board_at(path, copy=None, **options):
    return Leaderboard(path, copy, galleries=GALLERIES, **options)


def test_the_board_starts_with_the_published_rows_each_under_its_source(tmp_path):
    rows = {row["model"]: row for row in board_at(tmp_path / "board.sqlite3").rows()}
    vse = "VSE infinity, WSL grid + BERT"  # the paper's variant, named
    assert set(rows) == {"CLIP ViT-B/32", "BLIP (paper v1)", "BLIP (paper v5)", f"{vse} (paper v1)",
                         f"{vse} (paper v5)"} and {row["kind"] for row in rows.values()} == {PUBLISHED}
    assert (rows["BLIP (paper v1)"]["clean R@1 (i2t)"], rows["BLIP (paper v1)"][TEXT_UNNAMED]) == (81.9, 64.5)
    assert rows["BLIP (paper v5)"][TEXT_UNNAMED] == 48.4
    assert rows[f"{vse} (paper v1)"][TEXT_UNNAMED] == 37.5
    assert rows[f"{vse} (paper v5)"][TEXT_UNNAMED] == 37.6
    assert "arXiv:2304.10727v1" in rows["BLIP (paper v1)"]["source"]
    clip = rows["CLIP ViT-B/32"]
    assert clip["clean R@1 (i2t)"] == 50.12 and clip["mix_seed1 R@1"] == pytest.approx(19.836, abs=1e-3)
    assert clip["rand_voca R@1"] is None and "clip/ViT-B_32log.txt" in clip["source"]  # the log names no attack


def test_published_single_attack_numbers_are_no_mean_and_sort_apart(tmp_path):
    """Issue 41: the paper's and the log's numbers of a text attack they do not name (BLIP 48.4 and 64.5, VSE
    infinity 37.6 and 37.5, CLIP 37.00) are in a column that says so, not in the mean over all four text attacks; a
    submitted four-attack mean is sorted among means only, above them, however it compares with them."""
    board = board_at(tmp_path / "board.sqlite3")
    four = counted([{"attack": attack, "direction": "image_to_text", "recall@1": 30.0 + n}
                    for n, attack in enumerate(TEXT_ATTACKS)])
    assert board.submit(typed_rows(four), model="four attacks")[0]
    rows = board.rows()
    assert [row["model"] for row in rows][:3] == ["four attacks", "BLIP (paper v1)", "BLIP (paper v5)"]
    assert [row[TEXT_MEAN] for row in rows] == [31.5] + [None] * 5  # a mean only where there is one
    assert [row[TEXT_UNNAMED] for row in rows[1:]] == [64.5, 48.4, 37.6, 37.5, 37.0]  # apart, best first
    assert {row[RANK] for row in rows[1:]} == {"n/a"}  # no per-query outcomes: not compared


def test_a_board_of_an_earlier_version_gets_the_current_published_rows_and_keeps_the_submitted(tmp_path):
    """A board made when the VSE infinity rows did not name their variant: reopened, it has the current published
    rows only, and every submitted row."""
    path = tmp_path / "board.sqlite3"
    board = board_at(path)
    assert board.submit(typed_rows(ROWS), model="my model")[0]
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE submissions SET model = 'VSE infinity (paper v1)', digest = 'old' "
                           "WHERE model = 'VSE infinity, WSL grid + BERT (paper v1)'")
    models = [row["model"] for row in board_at(path).rows()]
    assert "VSE infinity (paper v1)" not in models and models.count("VSE infinity, WSL grid + BERT (paper v1)") == 1
    assert "my model" in models and len(models) == 6


def test_a_submission_survives_a_restart_and_is_kept_once(tmp_path):
    path = tmp_path / "board.sqlite3"
    stamp = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)
    assert board_at(path).submit(typed_rows(ROWS), model="my model", link="https://example.org/m", note="first", now=stamp)[0]
    again = board_at(path)  # the app restarted on the same file
    added, message = again.submit(typed_rows(ROWS), model="my model", precision="bf16")
    assert not added and "on the board already" in message
    mine = again.rows(kind=SUBMITTED)
    assert len(mine) == 1 and list(mine[0]) == [*COLUMNS, "id", "pending", "warnings"]
    row = mine[0]
    assert (row["clean R@1 (i2t)"], row["clean R@1 (t2i)"], row["rand_voca R@1"], row["danger R@1"]) == (
        51.0, 30.5, 40.0, 44.0)
    # two of four text attacks and one of six image galleries: no mean, which would sort beside full means
    assert row["text attacks R@1 (i2t, mean)"] is None and row["image attacks R@1 (t2i, mean)"] is None
    assert (row["link"], row["note"], row["submitted"]) == ("https://example.org/m", "first", "2026-12-01T12:00:00+00:00")
    assert again.submit(typed_rows(ROWS[:3]), model="my model")[0]  # other results: another row
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT COUNT(*) FROM submissions WHERE kind = 'submitted'").fetchone() == (2,)


@pytest.mark.parametrize("fields, problem", [
    ({"model": "  \x00 "}, "`model` is empty"),
    ({"model": "m" * 101}, "`model` has 101 characters; at most 100"),
    ({"model": "m", "link": "javascript:alert(1)"}, "`link` must start with http:// or https://"),
    ({"model": "m", "link": 'https://a.org/"><script>'}, "`link` must start with http:// or https://"),
    ({"model": "m", "precision": "int4"}, "`precision` must be one of"),
    ({"model": "m", "note": "n" * 501}, "`note` has 501 characters; at most 500"),
])
def test_bad_submissions_are_refused_by_name_and_nothing_is_stored(tmp_path, fields, problem):
    board = board_at(tmp_path / "board.sqlite3")
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        board.submit(typed_rows(ROWS), **fields)
    assert board.rows(kind=SUBMITTED) == []


def test_a_submission_may_name_any_precision_a_run_takes_or_other(tmp_path):
    from rococo_eval.models.families import PRECISIONS as RUN_PRECISIONS

    board = board_at(tmp_path / "board.sqlite3")
    for number, precision in enumerate([*RUN_PRECISIONS, "other"]):
        assert board.submit(typed_rows(ROWS[:number + 1]), model="m", precision=precision)[0], precision
    assert sorted(row["precision"] for row in board.rows(kind=SUBMITTED)) == sorted([*RUN_PRECISIONS, "other"])


def test_markup_in_a_name_is_kept_as_text(tmp_path):
    board = board_at(tmp_path / "board.sqlite3")
    board.submit(typed_rows(ROWS), model="<b>bold</b>\n model")
    assert board.rows(search="bold")[0]["model"] == "<b>bold</b> model"  # shown by the page as plain text


def test_a_session_is_rate_limited():
    assert rate_allows([], 0) and rate_allows([0, 1], 2) and not rate_allows([0, 1, 2], 3)
    assert rate_allows([0, 1, 2], 601)


def test_an_evaluation_at_other_settings_is_refused(tmp_path):
    board = board_at(tmp_path / "board.sqlite3")
    rows = [{**row, "settings": "ties optimistic, bootstrap 0"} for row in ROWS]
    with pytest.raises(ValueError, match="the evaluation used ties optimistic, bootstrap 0: the board takes"):
        board.submit(typed_rows(rows), model="m")
    nan = counted([{"attack": "danger", "direction": "image_to_text", "clean_recall@1": float("nan"), "recall@1": 40.0}])
    assert board.submit(typed_rows(nan), model="m")[0] and board.rows(kind=SUBMITTED)[0]["clean R@1 (i2t)"] is None


def test_an_r1_that_the_order_of_a_compact_files_ties_decides_is_refused(tmp_path):
    """A re-ranker's R@1 with bounds is refused; a bounded clean R@1 of an attacked row is not taken as the clean
    one (the board shows decided numbers only)."""
    board = board_at(tmp_path / "board.sqlite3")
    rows = [dict(row, **({"recall@1_bounds": (39.0, 41.0)} if row["attack"] == "danger" else {})) for row in ROWS]
    with pytest.raises(ValueError, match=r"the R@1 of danger/image_to_text depends on the order of a re-ranker's"):
        board.submit(typed_rows(rows), model="m")
    assert not board.rows(kind=SUBMITTED)
    attacked = counted([{"attack": "danger", "direction": "image_to_text", "clean_recall@1": 50.0,
                         "clean_recall@1_bounds": (50.0, 52.0), "recall@1": 40.0}])
    assert board.submit(typed_rows(attacked), model="m")[0]
    [row] = board.rows(kind=SUBMITTED)
    assert row["clean R@1 (i2t)"] is None and row["danger R@1"] == 40.0


def test_the_means_are_over_every_attack(tmp_path):
    from rococo_eval.catalog import IMAGE_ATTACKS, TEXT_ATTACKS

    rows = [{"attack": attack, "direction": "image_to_text", "recall@1": 40.0 + n} for n, attack in enumerate(TEXT_ATTACKS)]
    rows += [{"attack": attack, "direction": "text_to_image", "recall@1": 20.0 + n}
             for n, attack in enumerate(IMAGE_ATTACKS)]
    board = board_at(tmp_path / "board.sqlite3")
    assert board.submit(typed_rows(counted(rows)), model="complete")[0]
    [row] = board.rows(kind=SUBMITTED)
    assert row["text attacks R@1 (i2t, mean)"] == 41.5 and row["image attacks R@1 (t2i, mean)"] == 22.5


@pytest.mark.parametrize("rows, problem", [
    # issue 29's fake row: a 3 x 6 custom layout named after an attack, its gallery name taken from the file name
    ([{"attack": "rand_voca", "direction": "image_to_text", "recall@1": 100.0, "clean_recall@1": 100.0,
       "num_queries": 3, "num_gallery": 6, "file": "rand_voca.npz"}],
     r"rand_voca/image_to_text \(file rand_voca.npz\) has 3 queries x 6 gallery items; RoCOCO's is 8 x 81"),
    ([{"attack": "my_gallery", "direction": "image_to_text", "recall@1": 100.0, "num_queries": 8, "num_gallery": 81}],
     "my_gallery/image_to_text is not a RoCOCO gallery: the board takes the standard galleries only"),
    ([{"attack": "clean", "direction": "image_to_text", "recall@1": 100.0}],
     "clean/image_to_text has None queries x None gallery items"),
])
def test_a_row_needs_a_rococo_gallery_of_its_real_shape(tmp_path, rows, problem):
    board = board_at(tmp_path / "board.sqlite3")
    with pytest.raises(ValueError, match=problem):
        board.submit(typed_rows(rows), model="fake")
    assert board.rows(kind=SUBMITTED) == []


def test_a_board_without_galleries_takes_no_submission(tmp_path):
    board = Leaderboard(tmp_path / "board.sqlite3")  # a Space without RoCOCO's annotations
    with pytest.raises(ValueError, match="this board takes no submissions: it was opened without RoCOCO's galleries"):
        board.submit(typed_rows(ROWS), model="m")
    assert len(board.rows()) == 5  # the published rows are shown


def test_the_hourly_limit_holds_for_everyone_together(tmp_path):
    """Sixteen sessions at once (threads, each its own connection): the board takes its hourly limit and refuses
    the rest by name; an hour later it takes more."""
    import concurrent.futures

    board = board_at(tmp_path / "board.sqlite3", hourly_limit=5)
    now = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.timezone.utc)

    def submit(number):
        try:
            return board.submit(typed_rows(ROWS), model=f"model {number}", now=now)[0]
        except ValueError as error:
            return str(error)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(submit, range(16)))
    assert answers.count(True) == 5 and len(board.rows(kind=SUBMITTED)) == 5
    refusals = [answer for answer in answers if answer is not True]
    assert len(refusals) == 11 and all(
        "the board took 5 submissions in the last hour, its limit for everyone together (5)" in answer
        for answer in refusals)
    assert board.submit(typed_rows(ROWS), model="later", now=now + datetime.timedelta(minutes=61))[0]
    with pytest.raises(ValueError, match="`hourly_limit` must be a whole number >= 0, got -1"):
        board_at(tmp_path / "other.sqlite3", hourly_limit=-1)


@pytest.mark.parametrize("name, shown", [
    ("\u202eexe.ledom-doog", "exe.ledom-doog"),  # a right-to-left override would show it as good-model.exe
    ("bad\x85\x9b\x9cname", "badname"),  # C1 controls
    ("zero\u200bwidth\u2066isolate\u2069\u2028line\ufeff", "zerowidthisolateline"),
])
def test_names_links_and_notes_lose_every_control_and_format_character(tmp_path, name, shown):
    board = board_at(tmp_path / "board.sqlite3")
    assert board.submit(typed_rows(ROWS), model=name, note=f"note {name}", link=f"https://example.org/{name}")[0]
    [row] = board.rows(kind=SUBMITTED)
    assert (row["model"], row["note"], row["link"]) == (shown, f"note {shown}", f"https://example.org/{shown}")
    assert board.rows(search=shown[:6])[0]["model"] == shown


def test_a_database_that_cannot_be_read_is_named_and_left_as_it_is(tmp_path):
    path = tmp_path / "board.sqlite3"
    path.write_bytes(b"not a database, " * 512)
    before = path.read_bytes()
    with pytest.raises(BoardUnavailable, match="the leaderboard database board.sqlite3 cannot be read: file is not a "
                                               "database; it is left as it is") as refused:
        board_at(path)
    assert str(tmp_path) not in str(refused.value)  # the server's folders are not told to the page
    assert path.read_bytes() == before


def test_a_lock_held_too_long_is_named(tmp_path):
    path = tmp_path / "board.sqlite3"
    board = board_at(path, lock_timeout_s=0.5)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        with pytest.raises(BoardUnavailable, match="board.sqlite3 stayed locked by another process for 0.5 s: try again"):
            board.submit(typed_rows(ROWS), model="waiting")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert board.submit(typed_rows(ROWS), model="waiting")[0]


def test_a_row_whose_results_cannot_be_read_is_named(tmp_path):
    path = tmp_path / "board.sqlite3"
    board = board_at(path)
    assert board.submit(typed_rows(ROWS), model="damaged")[0]
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE submissions SET results = '{not json' WHERE model = 'damaged'")
    with pytest.raises(BoardUnavailable, match="board.sqlite3 holds a row \\('damaged'\\) whose results cannot be read"):
        board.rows()


def test_rows_whose_clean_numbers_disagree_are_refused_naming_the_files(tmp_path):
    """Issue 31: two files made independently gave clean R@1 80 and 90, and the board took its clean columns from
    them. The board itself refuses rows whose clean R@K differ within a direction, so no caller gets past it."""
    board = board_at(tmp_path / "board.sqlite3")
    disagreeing = [dict(row, file=f"{row['attack']}.npy", **({"clean_recall@1": 90.0}
                                                              if row["attack"] == "danger" else {})) for row in ROWS]
    with pytest.raises(ValueError) as raised:
        board.submit(typed_rows(disagreeing), model="two models")
    assert str(raised.value).startswith(
        "the files of this evaluation disagree, so they are not one model's files saved alike: image-to-text: the "
        "clean R@1 differs between files: 51.00 (4 of 8 queries) from clean.npy (the clean gallery), rand_voca.npy "
        "(the clean part of rand_voca); 90.00 (7 of 8 queries) from danger.npy (the clean part of danger).")
    assert board.rows(kind=SUBMITTED) == []
    without_clean = [row for row in disagreeing if row["attack"] != "clean"]  # the attacked rows among themselves
    with pytest.raises(ValueError, match="51.00 .* from rand_voca.npy .*; 90.00 .* from danger.npy"):
        board.submit(typed_rows(without_clean), model="two models")
    assert board.submit(typed_rows(ROWS), model="one model")[0]


def test_a_rerankers_rows_are_not_compared_and_give_no_clean_column(tmp_path):
    """A re-ranker's attacked gallery re-ranks other candidates than its clean gallery: its clean part may differ
    by right, so its rows (marked ``reranked``) are not compared, and their clean R@1 is not the board's clean one."""
    board = board_at(tmp_path / "board.sqlite3")
    reranked = [dict(row, reranked=True, **({"clean_recall@1": 53.0} if row["attack"] == "danger" else {}))
                for row in ROWS if row["direction"] == "image_to_text"]
    added, message = board.submit(typed_rows(reranked), model="blip")
    # issue 39: the check that did not run is said, in the words of `score` and of the evaluation's message
    unchecked = ", ".join(sorted(row["attack"] + "/image_to_text" for row in reranked))
    assert added and message == (
        f"added blip to the board; the clean numbers of {unchecked} were not checked against the other files of their "
        "direction: a re-ranker's scores (compact files, or a fill block), whose attacked galleries re-rank other "
        "candidates than the clean one, so their clean parts may differ by right (the board's clean column comes "
        "from the clean gallery alone)")
    attacked_only = [row for row in reranked if row["attack"] != "clean"]
    assert board.submit(typed_rows(attacked_only), model="blip, attacks only")[0]
    rows = {row["model"]: row for row in board.rows(kind=SUBMITTED)}
    assert rows["blip"]["clean R@1 (i2t)"] == 51.0  # the clean gallery's own
    assert rows["blip, attacks only"]["clean R@1 (i2t)"] is None and rows["blip, attacks only"]["danger R@1"] == 44.0


@pytest.mark.parametrize("name", ["\u3164", "\u2800\u2800", " \u3164 \u115f", "\uffa0"])
def test_a_name_that_looks_blank_is_refused(tmp_path, name):
    board = board_at(tmp_path / "board.sqlite3")
    with pytest.raises(ValueError, match="`model` .* looks blank"):
        board.submit(typed_rows(ROWS), model=name)
    assert board.rows(kind=SUBMITTED) == []


@pytest.mark.parametrize("name", ["BLIP (paper v1)", "blip (PAPER v5)", "CLIP\u3164ViT-B/32", "ＣＬＩＰ ViT-B/32"])
def test_a_submission_cannot_take_a_published_rows_name(tmp_path, name):
    board = board_at(tmp_path / "board.sqlite3")
    with pytest.raises(ValueError, match="is the name of a published row"):
        board.submit(typed_rows(ROWS), model=name)


def test_one_client_is_limited_apart_from_everyone(tmp_path):
    """Issue 41: one client with fresh sessions used all 30 hourly submissions; now it has its own limit."""
    from rococo_eval.board.leaderboard import CLIENT_HOURLY_LIMIT

    board = board_at(tmp_path / "board.sqlite3")
    for number in range(CLIENT_HOURLY_LIMIT):
        assert board.submit(typed_rows(ROWS), model=f"spam {number}", client="203.0.113.9")[0]
    with pytest.raises(ValueError, match=f"{CLIENT_HOURLY_LIMIT} submissions came from your address"):
        board.submit(typed_rows(ROWS), model="spam again", client="203.0.113.9")
    assert board.submit(typed_rows(ROWS), model="someone else", client="198.51.100.1")[0]


def test_the_board_is_ranked_once_per_change_of_its_rows_by_any_process(tmp_path):
    """Issue 41: a page load asks for the board twice (the table, the line under it); the rows are ranked again
    only when the database's rows changed, by this board or by another process on the same file."""
    here, elsewhere = board_at(tmp_path / "board.sqlite3"), board_at(tmp_path / "board.sqlite3")
    first = here.rows()
    assert here.rows(kind=PUBLISHED) == first and here.rows("blip") == [row for row in first if "BLIP" in row["model"]]
    assert here.rankings == 1
    first[0]["model"] = "changed by a caller"  # a caller's change never reaches the board's memo
    assert here.rows()[0]["model"] != "changed by a caller" and here.rankings == 1
    assert elsewhere.submit(typed_rows(ROWS), model="from another process")[0]
    assert "from another process" in [row["model"] for row in here.rows(kind=SUBMITTED)] and here.rankings == 2
    with sqlite3.connect(tmp_path / "board.sqlite3") as connection:  # a change of a row's state counts too
        connection.execute("UPDATE submissions SET note = 'edited' WHERE model = 'from another process'")
    assert here.rows(kind=SUBMITTED)[0]["note"] == "edited" and here.rankings == 3


def test_the_board_takes_a_report_or_its_summary_rows_never_dicts(tmp_path):
    """An evaluation comes as its Report (its summary's gallery rows go on the board) or as its SummaryRows; rows kept
    as dicts are refused by type, saying how to read them."""
    from rococo_eval.results import GalleryResult, build_report

    board = board_at(tmp_path / "board.sqlite3")
    results = {gallery_key(row["attack"], row["direction"]): GalleryResult(
        {name: value for name, value in row.items() if name not in ("attack", "direction")})
        for row in ROWS if "seeds" not in row}
    assert board.submit(build_report(results, {"model": "m"}), model="from a report")[0]
    with pytest.raises(TypeError, match="`evaluation` must be a Report or a sequence of SummaryRow, got rows of type "
                                        r"dict \(SummaryRow.from_dict reads a row kept as a dict\)"):
        board.submit(ROWS, model="dicts")
    [row] = board.rows(kind=SUBMITTED)
    assert (row["model"], row["clean R@1 (i2t)"], row["danger R@1"], row["mix_seed1 R@1"]) == (
        "from a report", 51.0, 44.0, 20.0)
