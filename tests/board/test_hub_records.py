"""The leaderboard's records in a dataset repo (rococo_eval.board.records, rococo_eval.board.hub_records), against a
fake Hub on 127.0.0.1 that stores every commit's files and serves them back: the board outlives the Space's disk."""

import concurrent.futures
import datetime
import json
import time

import numpy as np
import pytest

from helpers import typed_rows
from rococo_eval.data.facts import GalleryFacts
from rococo_eval.catalog import TEXT_ATTACKS, gallery_key
from rococo_eval.space.handlers import Handlers
from rococo_eval.board.hub_records import HubRecords
from rococo_eval.board.leaderboard import SUBMITTED, Leaderboard, page_of, rococo_galleries
from rococo_eval.board.records import (
    RecordError,
    content_digest,
    make_record,
    outcomes_of,
    pack_bits,
    read_record,
    record_bytes,
    record_path,
)
from rococo_eval.space.views import board_table

CAPTIONS = [5] * 7 + [6]
GALLERIES = rococo_galleries(CAPTIONS)
REPO = "org/board"
KEYS = ["clean/image_to_text", "rand_voca/image_to_text", "clean/text_to_image", "mix_seed1/text_to_image"]


def evaluation(seed: int) -> tuple[list[dict], dict]:
    """Summary rows of four galleries and their per-query outcomes, drawn with ``seed``: the numbers are those the
    bits give, and the attacked rows' clean numbers those of the clean galleries (as one model's files give them)."""
    rng = np.random.default_rng(seed)
    rows, outcomes, clean = [], {}, {}
    for key in KEYS:
        attack, direction = key.split("/")
        queries, items = GALLERIES[key]
        hit = rng.random(queries) < 0.5
        row = {"attack": attack, "direction": direction, "recall@1": 100.0 * hit.sum() / queries,
               "num_queries": queries, "num_gallery": items}
        outcomes[key] = {"hit": hit}
        if attack == "clean":
            clean[direction] = hit
        else:
            adversarial = ~hit & (rng.random(queries) < 0.5)
            row.update({"clean_recall@1": 100.0 * clean[direction].sum() / queries,
                        "false_rate": 100.0 * adversarial.sum() / queries})
            outcomes[key].update({"clean_hit": clean[direction], "top1_adversarial": adversarial})
        rows.append(row)
    return rows, outcomes


def record(seed: int, model: str = "", **fields) -> dict:
    rows, outcomes = evaluation(seed)
    return make_record(rows, outcomes, model=model or f"model {seed}", link="", precision="fp32", note="",
                       submitted_at="2025-06-01T10:00:00+00:00", **fields)


def put(hub, *records) -> None:
    """Records in the fake Hub's repo, as files of a commit made elsewhere."""
    hub.files.setdefault(REPO, {}).update({record_path(one): record_bytes(one) for one in records})


def space(folder, hub, galleries=GALLERIES, **options):
    """A Space's board at start: its database in ``folder``, its records from the fake Hub."""
    records = HubRecords(REPO, folder / "board.sqlite3.hub", endpoint=hub.url, **{"timeout_s": 20, **options})
    board = Leaderboard(folder / "board.sqlite3", records, galleries=galleries, hourly_limit=100)
    records.start(board)
    return board


def shown(board) -> list[tuple]:
    return sorted((row["model"], row["text attacks R@1 (i2t, mean)"], row["clean R@1 (t2i)"], row["pending"])
                  for row in board.rows(kind=SUBMITTED))


def until(condition, timeout_s: float = 60) -> bool:
    """Whether ``condition()`` came true within ``timeout_s`` (checked every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_record_keeps_the_per_query_outcomes_and_checks_its_numbers_against_them():
    made = record(1)
    checked = read_record(record_bytes(made), GALLERIES, "r.json")
    rows, outcomes = evaluation(1)
    for key in KEYS:
        for name, values in outcomes[key].items():
            assert outcomes_of(checked)[key][name].tolist() == values.tolist()
    assert record_path(made) == f"submissions/2025/{made['id']}.json"
    forged = json.loads(record_bytes(made))
    forged["galleries"]["clean/image_to_text"]["recall@1"] = 99.0
    with pytest.raises(RecordError, match="content does not match its digest"):
        read_record(json.dumps(forged).encode(), GALLERIES, "forged.json")


@pytest.mark.parametrize("change, problem", [
    (lambda data: data[:len(data) // 2], "not JSON"),
    (lambda data: b"<html>not a record</html>", "not JSON"),
    (lambda data: data.replace(b'"schema_version":1', b'"schema_version":9'), "schema version 9"),
    (lambda data: data + b" " * (4 * 1024 * 1024), "more than a record may hold"),
])
def test_a_damaged_record_is_refused_by_name(change, problem):
    with pytest.raises(RecordError, match=f"bad.json: .*{problem}"):
        read_record(change(record_bytes(record(2))), GALLERIES, "bad.json")


def test_numbers_that_do_not_match_their_bits_are_refused():
    rows, outcomes = evaluation(3)
    rows[1] = {**rows[1], "recall@1": rows[1]["recall@1"] + 12.5}
    made = make_record(rows, outcomes, model="m", link="", precision="fp32", note="", submitted_at="2026-12-05T10:00:00")
    with pytest.raises(RecordError, match="gallery rand_voca/image_to_text: `recall@1` is .* but its `hit` bits give"):
        read_record(record_bytes(made), GALLERIES, "m.json")
    short = make_record(*evaluation(3), model="m", link="", precision="fp32", note="", submitted_at="2026-12-05T10:00")
    short["galleries"]["clean/image_to_text"]["outcomes"]["hit"] = pack_bits([True] * 20)
    short["digest"] = content_digest(short)
    with pytest.raises(RecordError, match="gallery clean/image_to_text: outcome `hit` holds 24 bits for 8 queries"):
        read_record(record_bytes(short), GALLERIES, "m.json")


def test_a_restart_on_a_new_disk_shows_the_same_board_from_200_records(tmp_path, fake_hub):
    """Done when of issue 41: 200 records in the repo and two submissions of this Space; a new Space on an empty
    disk shows the same board (no row pending once the records landed)."""
    put(fake_hub, *[record(seed) for seed in range(200)])
    first = space(tmp_path / "disk1", fake_hub)
    for seed in (1000, 1001):
        rows, outcomes = evaluation(seed)
        added, message = first.submit(typed_rows(rows), model=f"submitted {seed}", outcomes=outcomes)
        assert added and "pending until its record is in the dataset repo" in message
    assert first.hub.wait(60)
    first.hub.close()
    before = shown(first)
    assert len(before) == 202 and not any(row[3] for row in before)
    started = time.monotonic()
    second = space(tmp_path / "disk2", fake_hub)
    assert time.monotonic() - started < 30
    second.hub.close()
    assert shown(second) == before
    assert len(second.outcomes()) == 202  # every row's per-query outcomes, for the rank bands
    assert len(fake_hub.files[REPO]) == 202


def test_damaged_records_are_left_out_and_named_and_the_rest_loads(tmp_path, fake_hub):
    good = [record(seed) for seed in range(3)]
    put(fake_hub, *good)
    bad = {"submissions/2025/" + "a" * 32 + ".json": record_bytes(record(7))[:100],
           "submissions/2025/" + "b" * 32 + ".json": b"not json",
           "submissions/2025/" + "c" * 32 + ".json": record_bytes(record(8)).replace(b'"schema_version":1',
                                                                                      b'"schema_version":2')}
    fake_hub.files[REPO].update(bad)
    board = space(tmp_path, fake_hub)
    board.hub.close()
    assert [row[0] for row in shown(board)] == ["model 0", "model 1", "model 2"]
    assert sorted(problem.split(":")[0] for problem in board.hub.skipped) == sorted(bad)


def test_the_line_under_the_board_names_the_damaged_records_and_what_a_restart_loses(tmp_path, fake_hub):
    """The page's line under the board (Handlers.board_note): how many rows it shows, every record left out by name
    with its problem, and without a repo that a restart without persistent storage loses the board."""
    put(fake_hub, record(1))
    damaged = "submissions/2025/" + "d" * 32 + ".json"
    fake_hub.files[REPO][damaged] = b"not json"
    board = space(tmp_path / "repo", fake_hub)
    board.hub.close()
    note = Handlers(GalleryFacts(CAPTIONS), tmp_path / "outputs", board=board).board_note("", SUBMITTED)
    assert note.startswith("Rows 1-1 of 1 (page 1 of 1).")
    assert f"1 record(s) of the dataset repo {REPO} are left out of the board, damaged: {damaged}: not JSON" in note
    assert "restart" not in note
    local = Leaderboard(tmp_path / "local.sqlite3", galleries=GALLERIES)
    note = Handlers(GalleryFacts(CAPTIONS), tmp_path / "outputs", board=local).board_note()
    assert note.startswith("Rows 1-5 of 5 (page 1 of 1).")
    assert "a restart of a Space without persistent storage loses it" in note


def test_the_hourly_limit_counts_the_submissions_to_this_space_not_the_records_of_other_replicas(tmp_path,
                                                                                                  fake_hub):
    """Records that another replica committed in the last hour are on the board, but the hourly limit is this
    Space's: with a limit of 2, two submissions here are taken after 3 recent records came in, and the third is not."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    elsewhere = [make_record(*evaluation(seed), model=f"elsewhere {seed}", link="", precision="fp32", note="",
                             submitted_at=now) for seed in range(3)]
    put(fake_hub, *elsewhere)
    board = space(tmp_path, fake_hub)
    board.hourly_limit = 2
    board.hub.close()
    assert [row[0] for row in shown(board)] == ["elsewhere 0", "elsewhere 1", "elsewhere 2"]
    for seed in (10, 11):
        rows, outcomes = evaluation(seed)
        assert board.submit(typed_rows(rows), model=f"here {seed}", outcomes=outcomes)[0]
    rows, outcomes = evaluation(12)
    with pytest.raises(ValueError, match=r"the board took 2 submissions in the last hour, its limit for everyone "
                                         r"together \(2\)"):
        board.submit(typed_rows(rows), model="here 12", outcomes=outcomes)


def test_the_same_model_with_the_same_results_in_two_records_is_one_row(tmp_path, fake_hub):
    put(fake_hub, record(5, "twice"), record(5, "twice"))
    board = space(tmp_path, fake_hub)
    board.hub.close()
    assert [row[0] for row in shown(board)] == ["twice"]


def test_an_unreachable_hub_at_start_serves_the_cache_and_queues_submissions(tmp_path, fake_hub):
    put(fake_hub, record(1))
    space(tmp_path, fake_hub).hub.close()
    fake_hub.down = fake_hub.fail = True
    board = space(tmp_path, fake_hub, timeout_s=3, retry_s=0.2)  # huggingface_hub tries again for ~25 s
    assert [row[0] for row in shown(board)] == ["model 1"]  # the cache as it is
    assert board.hub.reachable is False
    rows, outcomes = evaluation(2)
    assert board.submit(typed_rows(rows), model="queued", outcomes=outcomes)[0]
    assert ("queued", True) in [(row[0], row[3]) for row in shown(board)]  # pending
    fake_hub.down = fake_hub.fail = False
    assert board.hub.wait(60)  # tried again with backoff, and landed
    board.hub.close()
    assert not any(row[3] for row in shown(board)) and len(fake_hub.files[REPO]) == 2


def test_a_pending_row_comes_back_from_its_outbox_and_lands_at_the_next_start(tmp_path, fake_hub):
    fake_hub.down = fake_hub.fail = True
    board = space(tmp_path, fake_hub, timeout_s=2, retry_s=60)
    rows, outcomes = evaluation(4)
    assert board.submit(typed_rows(rows), model="waiting", outcomes=outcomes)[0]
    board.hub.close()
    (tmp_path / "board.sqlite3").unlink()  # the database is lost, the outbox survived
    restarted = space(tmp_path, fake_hub, timeout_s=2, retry_s=60)
    assert shown(restarted)[0][0] == "waiting" and shown(restarted)[0][3]  # pending: not yet safe
    restarted.hub.close()
    fake_hub.down = fake_hub.fail = False
    again = space(tmp_path, fake_hub)
    assert again.hub.wait(60)
    again.hub.close()
    assert [json.loads(data)["model"] for data in fake_hub.files[REPO].values()] == ["waiting"]
    assert [row[0] for row in shown(again)] == ["waiting"] and not shown(again)[0][3]


def test_a_hanging_hub_never_holds_a_submission_and_16_at_once_are_16_records(tmp_path, fake_hub):
    fake_hub.hang_commits()
    board = space(tmp_path, fake_hub, timeout_s=3, retry_s=0.2)

    def submit(seed):
        rows, outcomes = evaluation(seed)
        started = time.monotonic()
        added, _ = board.submit(typed_rows(rows), model=f"at once {seed}", outcomes=outcomes, client=f"10.0.0.{seed}")
        return added, time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(submit, range(16)))
    assert all(added for added, _ in answers) and max(seconds for _, seconds in answers) < 2
    assert len(board.hub.pending()) == 16
    assert until(lambda: fake_hub.max_commits_at_once >= 1)  # the Hub holds a commit
    fake_hub.answer_commits()
    assert board.hub.wait(120)
    board.hub.close()
    stored = [json.loads(data)["model"] for data in fake_hub.files[REPO].values()]
    assert sorted(stored) == sorted(f"at once {seed}" for seed in range(16))
    assert not any(row[3] for row in shown(board)) and fake_hub.dropped  # a commit held was dropped, and tried again


def test_two_replicas_submitting_at_once_converge_after_a_refresh(tmp_path, fake_hub):
    one, two = space(tmp_path / "one", fake_hub), space(tmp_path / "two", fake_hub, refresh_s=0.5)
    for board, seed in ((one, 1), (two, 2)):
        rows, outcomes = evaluation(seed)
        assert board.submit(typed_rows(rows), model=f"replica {seed}", outcomes=outcomes)[0]
    assert one.hub.wait(60) and two.hub.wait(60)
    assert until(lambda: len(shown(two)) == 2)  # the timed refresh
    assert one.hub.refresh()
    one.hub.close(), two.hub.close()
    assert shown(one) == shown(two) == [("replica 1", None, shown(one)[0][2], False),
                                        ("replica 2", None, shown(two)[1][2], False)]


def test_a_failed_refresh_keeps_the_board(tmp_path, fake_hub):
    put(fake_hub, record(1))
    board = space(tmp_path, fake_hub, timeout_s=2)
    fake_hub.down = True
    assert not board.hub.refresh()
    board.hub.close()
    assert [row[0] for row in shown(board)] == ["model 1"]


def test_validity_warnings_go_into_the_record_and_onto_the_board(tmp_path, fake_hub):
    board = space(tmp_path, fake_hub)
    rows, outcomes = evaluation(6)
    rows[1] = {**rows[1], "order_overridden": True}
    assert board.submit(typed_rows(rows), model="overridden", outcomes=outcomes)[0]
    assert board.hub.wait(60)
    board.hub.close()
    [stored] = [json.loads(data) for data in fake_hub.files[REPO].values()]
    assert stored["validity_warnings"] == ["rand_voca/image_to_text: scored in the order stated, which its scores "
                                           "contradict (trust-order override)"]
    assert board.rows(search="overridden")[0]["warnings"] == stored["validity_warnings"]
    assert gallery_key("rand_voca", "image_to_text") in board.outcomes()[board.rows(search="overridden")[0]["id"]]


def test_a_space_restarted_on_a_new_disk_ranks_its_rows_on_the_records_outcomes(tmp_path, fake_hub):
    """Planted per-query outcomes on 400 image queries: "strong" gets 320 right on every text attack, "weak" 160 and
    "weak twin" the same 160 but two (one query lost, one won, on every attack). Strong against weak is 160 discordant
    queries, all one way: significantly better, so strong ranks 1 alone; weak against its twin is 2 discordant queries,
    one each way: tied, one band. Two rows come from the repo and one is submitted to the first Space; a second Space
    on an empty disk ranks them the same from the records alone, whatever page or filter shows them; the published
    rows, without outcomes, stay n/a."""
    galleries = rococo_galleries([5] * 400)
    queries = np.arange(400)
    text_keys = [gallery_key(attack, "image_to_text") for attack in TEXT_ATTACKS]

    def ranked(hit) -> tuple[list[dict], dict]:
        clean_hit = queries < 360
        rows = [{"attack": "clean", "direction": "image_to_text", "recall@1": 90.0, "num_queries": 400,
                 "num_gallery": galleries["clean/image_to_text"][1]}]
        outcomes = {"clean/image_to_text": {"hit": clean_hit}}
        for key in text_keys:
            attack = key.split("/")[0]
            rows.append({"attack": attack, "direction": "image_to_text", "recall@1": 100.0 * hit.mean(),
                         "clean_recall@1": 90.0, "num_queries": 400, "num_gallery": galleries[key][1]})
            outcomes[key] = {"hit": hit, "clean_hit": clean_hit}
        return rows, outcomes

    strong, weak = queries < 320, queries < 160
    twin = weak.copy()
    twin[[0, 200]] = False, True
    put(fake_hub, *[make_record(*ranked(hit), model=model, link="", precision="fp32", note="",
                                submitted_at="2026-06-01T10:00:00+00:00")
                    for model, hit in (("strong", strong), ("weak", weak))])
    first = space(tmp_path / "disk1", fake_hub, galleries)
    assert first.submit(typed_rows(ranked(twin)[0]), model="weak twin", outcomes=ranked(twin)[1])[0]
    assert first.hub.wait(60)
    first.hub.close()
    bands = {row["model"]: row["rank"] for row in first.rows()}
    second = space(tmp_path / "disk2", fake_hub, galleries)
    second.hub.close()
    assert {row["model"]: row["rank"] for row in second.rows()} == bands
    assert {model: bands[model] for model in ("strong", "weak", "weak twin")} == {
        "strong": "1", "weak": "2-3", "weak twin": "2-3"}
    assert {band for model, band in bands.items() if model not in ("strong", "weak", "weak twin")} == {"n/a"}
    assert [(row["model"], row["rank"]) for row in second.rows(search="twin")] == [("weak twin", "2-3")]
    assert [row["rank"] for row in page_of(second.rows(kind=SUBMITTED), 1, page_rows=1)[0]] == ["1"]
    assert "2-3" in board_table(second.rows(), "means")["rank"].tolist()
