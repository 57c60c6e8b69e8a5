"""The Space in a real browser: Debian's chromium, driven by Playwright, uploads a score file and reads the results.

Screenshots go to ``test-artifacts/``. The browser comes from ``apt-get install chromium`` (never
``playwright install``).
"""

from pathlib import Path

import numpy as np
import pytest

import app
from helpers.space_app import DECIDING_CAPTIONS, TinySource, clear_scores, serve
from rococo_recall import rococo_recall

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 30_000

@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from playwright import sync_api

    assert CHROMIUM.exists(), "the browser test needs Debian's chromium: `make test` installs it with apt-get"
    demo = app.build_app(source=TinySource(DECIDING_CAPTIONS), output_dir=tmp_path_factory.mktemp("outputs"))
    url = serve(demo)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="load")
        page.get_by_role("button", name="Evaluate", exact=True).wait_for()
        yield page
        browser.close()
    demo.close()


def _errors(page):
    return page.locator("[data-testid=toast-body].error").all_inner_texts()


def _table(page, selector):
    """Headers and data rows of a gradio Dataframe, as the page shows them."""
    rows = page.locator(selector).get_by_role("row")
    headers = [text.strip() for text in rows.first.get_by_role("columnheader").all_inner_texts()]
    return headers, [[text.strip() for text in rows.nth(i).inner_text().split("\n")] for i in range(1, rows.count())]


def _upload_and_evaluate(page, path):
    page.locator("input[type=file]").first.set_input_files(str(path))
    page.get_by_role("grid", name="layouts").get_by_role("row").filter(has_text=path.name).wait_for()  # detected
    page.get_by_role("button", name="Evaluate", exact=True).click()


def test_upload_evaluate_and_read_the_table(page, tmp_path):
    layout, scores = clear_scores("rand_voca", "official", seed=2)  # its order shows in the scores
    path = tmp_path / "clip_rand_voca.npy"
    np.save(path, scores)
    expected = rococo_recall(scores, **layout.metric_inputs())

    _upload_and_evaluate(page, path)
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    chart = page.locator("#recall-chart img")
    chart.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=chart.element_handle())
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-evaluate.png"), full_page=True)

    assert not _errors(page), _errors(page)
    headers, rows = _table(page, "#results-table")
    assert len(rows) == 1, rows
    shown = dict(zip(headers, rows[0]))
    assert shown["file"] == path.name and shown["attack"] == "rand_voca"
    numbers = {name: float(shown[label]) for name, label in [("recall@1", "R@1"), ("recall@5", "R@5"),
                                                               ("clean_recall@1", "clean R@1"),
                                                               ("false_rate", "false rate")]}
    assert numbers == {name: round(expected[name], 2) for name in numbers}
    assert 0 < numbers["recall@1"] < numbers["clean_recall@1"]
    assert "the scores decide the official order" in page.locator("#evaluate-message").inner_text()


def test_the_page_opens_with_image_0_explored(page):
    page.reload(wait_until="load")
    page.get_by_role("tab", name="Explore").click()
    page.locator(".rococo-captions").get_by_text("number 0 in scene 0").first.wait_for()  # no "Show" click
    assert "Image 0:" in page.get_by_text("Image 0:").first.inner_text()


def test_what_fooled_the_model_after_an_evaluation(page, tmp_path):
    """After an evaluation the new tab lists the flipped queries (largest margin first, the replaced word
    marked), the by-word table and its chart; the results table fits the page; Compare shows the evaluation
    without a click on Refresh."""
    layout, scores = clear_scores("rand_voca", "official", seed=7)
    path = tmp_path / "clip_rand_voca.npy"
    np.save(path, scores)
    expected = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    flipped = np.flatnonzero((expected["clean_rank"] == 0) & (expected["rank"] > 0))
    margins = expected["top_score"][flipped] - expected["best_correct_score"][flipped]
    page.reload(wait_until="load")
    page.get_by_role("button", name="Evaluate", exact=True).wait_for()
    _upload_and_evaluate(page, path)
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], widths  # the results table does not widen the page: it scrolls in its frame
    assert page.evaluate("() => { let e = document.querySelector('#results-table table'); while (e && !(['auto', "
                         "'scroll'].includes(getComputedStyle(e).overflowX) && e.scrollWidth > e.clientWidth)) "
                         "e = e.parentElement; return e !== null; }")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#results-table").screenshot(path=str(ARTIFACTS / "browser-results-table.png"))

    page.get_by_role("tab", name="What fooled the model").click()
    note = page.locator("#flipped-note")
    note.get_by_text(f"{len(flipped)} flipped queries").wait_for()
    chart = page.locator("#word-chart img")
    chart.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=chart.element_handle())
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-flipped.png"), full_page=True)
    assert not _errors(page), _errors(page)
    rows = page.locator("#flipped-queries table.rococo-flipped tr")
    assert rows.count() == min(10, len(flipped))
    first = rows.first.inner_text()
    assert f"query {flipped[np.argmax(margins)]}" in first and f"margin {margins.max():.4f}" in first
    assert rows.first.locator("mark").first.inner_text() == "war" and "dog → war" in first
    headers, words = _table(page, "#word-table")
    assert headers[:3] == ["attack", "grouped by", "word"] and words[0][:3] == ["rand_voca", "replaced", "dog"]

    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("row").filter(has_text="your upload").first.wait_for()  # no click on Refresh
    page.screenshot(path=str(ARTIFACTS / "browser-compare.png"), full_page=True)


def test_a_bad_upload_shows_its_error(page, tmp_path):
    path = tmp_path / "wrong_shape.npy"
    np.save(path, np.zeros((3, 3), dtype=np.float32))
    page.reload(wait_until="load")
    page.get_by_role("button", name="Evaluate", exact=True).wait_for()
    _upload_and_evaluate(page, path)
    page.locator("[data-testid=toast-body].error").get_by_text("wrong_shape.npy").wait_for()
    page.wait_for_timeout(500)  # the toast slides in
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-error.png"))
    assert any("wrong_shape.npy: shape (3, 3) fits no RoCOCO layout" in text for text in _errors(page))


def test_an_unclear_order_is_asked_for_and_then_used(page, tmp_path):
    """Random scores cannot tell the order: the table leaves it blank, Evaluate refuses; once chosen, it is used."""
    layout, _ = clear_scores("danger", "dataset")
    scores = np.random.default_rng(5).standard_normal((layout.num_queries, layout.num_gallery)).astype(np.float32)
    path = tmp_path / "noise_danger.npy"
    np.save(path, scores)
    page.reload(wait_until="load")
    page.get_by_role("button", name="Evaluate", exact=True).wait_for()
    _upload_and_evaluate(page, path)
    page.locator("[data-testid=toast-body].error").get_by_text("noise_danger.npy").wait_for()
    assert any("set it in the `order` column of the layout table" in text for text in _errors(page))
    headers, rows = _table(page, "[aria-label=layouts]")
    assert rows[0][:3] == ["noise_danger.npy", "danger", "image_to_text"]  # and no order
    assert rows[0][3].startswith("danger image-to-text gallery") and "choose the order" in rows[0][3]

    order_cell = page.get_by_role("grid", name="layouts").get_by_role("row").nth(1).get_by_role("gridcell").nth(3)
    order_cell.dblclick()
    page.keyboard.type("dataset")
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Evaluate", exact=True).click()
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    headers, rows = _table(page, "#results-table")
    shown = dict(zip(headers, rows[0]))
    expected = rococo_recall(scores, **layout.metric_inputs())
    assert float(shown["R@1"]) == round(expected["recall@1"], 2)
    assert "danger image-to-text gallery in the dataset order, as chosen" in \
        page.locator("#evaluate-message").inner_text()


def test_a_submitted_evaluation_appears_on_the_leaderboard(page, tmp_path):
    layout, scores = clear_scores("rand_voca", "official", seed=4)
    path = tmp_path / "board_rand_voca.npy"
    np.save(path, scores)
    page.goto(page.url, wait_until="load")  # a fresh session: the earlier tests' uploads and layouts are gone
    page.get_by_role("button", name="Evaluate", exact=True).wait_for()
    _upload_and_evaluate(page, path)
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    page.get_by_text("Submit this evaluation to the leaderboard").click()
    page.locator("#submit-model textarea, #submit-model input").first.fill("<i>browser</i> model")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_function("() => document.querySelector('#submit-message textarea').value"
                           " === 'added <i>browser</i> model to the board'")
    page.get_by_role("tab", name="Leaderboard").click()
    row = page.locator("#leaderboard-table").get_by_role("row").filter(has_text="<i>browser</i> model")
    row.wait_for()  # the name as text: no markup made of it
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-leaderboard.png"), full_page=True)
    expected = rococo_recall(scores, **layout.metric_inputs())
    cells = row.inner_text().split("\n")  # the columns (gradio_client's test checks each by its header)
    assert "submitted" in cells and f"{expected['recall@1']:.2f}" in cells
    assert page.locator("#leaderboard-table").get_by_role("row").filter(has_text="BLIP (paper v5)").count() == 1
    assert not _errors(page), _errors(page)


def test_a_page_load_shows_the_board_of_now(page, tmp_path):
    """Rows added after the server started (here by another process's board on the same database) are on the
    Leaderboard tab when a page loads, before any Refresh (issue 29: the page showed the board of server start)."""
    from rococo_eval.space.leaderboard import Leaderboard, rococo_galleries

    database = tmp_path / "board.sqlite3"
    demo = app.build_app(source=TinySource(DECIDING_CAPTIONS), output_dir=tmp_path / "outputs",
                         leaderboard_db=database)
    url = serve(demo)
    try:
        layout, scores = clear_scores("rand_voca", "official", seed=8)
        row = {"attack": "rand_voca", "direction": "image_to_text", "num_queries": layout.num_queries,
               "num_gallery": layout.num_gallery, **rococo_recall(scores, **layout.metric_inputs())}
        other = Leaderboard(database, galleries=rococo_galleries(DECIDING_CAPTIONS))
        assert other.submit([row], model="added elsewhere")[0]
        fresh = page.context.browser.new_page(viewport={"width": 1400, "height": 1600})  # the module's browser
        try:
            fresh.set_default_timeout(TIMEOUT_MS)
            fresh.goto(url, wait_until="load")
            fresh.get_by_role("tab", name="Leaderboard").click()
            board = fresh.locator("#leaderboard-table").get_by_role("row")
            board.filter(has_text="added elsewhere").wait_for()
            assert board.filter(has_text=f"{row['recall@1']:.2f}").count() == 1
            assert not _errors(fresh), _errors(fresh)
        finally:
            fresh.close()
    finally:
        demo.close()
