"""The Space in a real browser: Debian's chromium, driven by Playwright, uploads a score file and reads the results.

Screenshots go to ``test-artifacts/``. The browser comes from ``apt-get install chromium`` (never
``playwright install``).
"""

import re

import numpy as np
import pytest

import app
from helpers import typed_rows
from helpers.chromium import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from helpers.space_app import DECIDING_CAPTIONS, TinySource, clear_scores, serve
from rococo_eval.space.views import BOARD_VIEWS
from rococo_recall import rococo_recall

TIMEOUT_MS = 30_000

@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from playwright import sync_api

    assert CHROMIUM.exists(), "the browser test needs Debian's chromium: `make test` installs it with apt-get"
    demo = app.build_app(source=TinySource(DECIDING_CAPTIONS), output_dir=tmp_path_factory.mktemp("outputs"))
    url = serve(demo)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
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


def _records(page, selector):
    """The data rows of a gradio Dataframe as dicts by header, every cell kept (an empty one as "")."""
    rows = page.locator(selector).get_by_role("row")
    headers = [text.strip() for text in rows.first.get_by_role("columnheader").all_inner_texts()]
    return [dict(zip(headers, (text.strip() for text in rows.nth(i).get_by_role("gridcell").all_inner_texts())))
            for i in range(1, rows.count())]


def _upload_and_evaluate(page, path):
    page.locator("input[type=file]").first.set_input_files(str(path))
    page.get_by_role("grid", name="layouts").get_by_role("row").filter(has_text=path.name).wait_for()  # detected
    page.get_by_role("button", name="Evaluate", exact=True).click()


def _wait_in_viewport(page, locator):
    """Wait until ``locator``'s element lies inside the viewport (1280 x 900), without scrolling to it."""
    page.wait_for_function("element => { const box = element.getBoundingClientRect(); return box.height > 0 && "
                           "box.top >= 0 && box.bottom <= window.innerHeight; }", arg=locator.element_handle(),
                           timeout=5_000)
    box = locator.bounding_box()
    assert 0 <= box["y"] and box["y"] + box["height"] <= VIEWPORT["height"], box


def _submit(page, model):
    """Submit the last evaluation from the Evaluate tab's form under the name ``model``."""
    page.get_by_role("tab", name="Evaluate").click()
    form = page.get_by_text("Submit this evaluation to the leaderboard")
    if not page.locator("#submit-model").is_visible():
        form.click()
    page.locator("#submit-model textarea, #submit-model input").first.fill(model)
    page.get_by_role("button", name="Submit", exact=True).click()


def _board_rows(page):
    """The Leaderboard tab's rows as shown, after checking that the board shows no "Error" badge."""
    page.get_by_role("tab", name="Leaderboard").click()
    board = page.locator("#leaderboard-table")
    board.get_by_role("row").filter(has_text="BLIP (paper v5)").wait_for()
    page.wait_for_timeout(500)  # an update of the board, if one comes, lands
    assert board.get_by_text("Error", exact=True).count() == 0, board.inner_text()[:500]
    return _table(page, "#leaderboard-table")


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
    widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth, "
                           "document.querySelector('#results-table table').scrollWidth, "
                           "document.querySelector('#results-table').clientWidth]")
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths  # at 1280 px: no sideways scrolling at all
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
    assert any("choose it from its order list under the layout table" in text for text in _errors(page))
    headers, rows = _table(page, "[aria-label=layouts]")
    assert rows[0][:3] == ["noise_danger.npy", "danger", "image_to_text"]  # and no order
    assert rows[0][3].startswith("danger image-to-text gallery") and "choose the order" in rows[0][3]

    order_list = page.locator("#order-danger")  # the order is chosen from a list, not typed
    assert order_list.get_by_text("order of noise_danger.npy (danger)").is_visible()
    assert not page.locator("#order-rand_voca").is_visible()  # no rand_voca file: no list
    order_list.locator("input").click()
    page.get_by_role("option", name="dataset", exact=True).click()
    layouts = page.get_by_role("grid", name="layouts")
    layouts.get_by_role("gridcell").filter(has_text="order given").wait_for()
    headers, rows = _table(page, "[aria-label=layouts]")
    assert rows[0][:4] == ["noise_danger.npy", "danger", "image_to_text", "dataset"]
    assert "order given" in rows[0][4] and "choose the order" not in " ".join(rows[0])  # the note is told
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-order-list.png"))
    page.get_by_role("button", name="Evaluate", exact=True).click()
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    headers, rows = _table(page, "#results-table")
    shown = dict(zip(headers, rows[0]))
    expected = rococo_recall(scores, **layout.metric_inputs())
    assert float(shown["R@1"]) == round(expected["recall@1"], 2)
    assert "danger image-to-text gallery in the dataset order (shape " in \
        page.locator("#evaluate-message").inner_text()


def test_a_submitted_evaluation_appears_on_the_leaderboard(page, tmp_path):
    """A float16 upload sets the form's precision to fp16; the submitted row is on the board, its name as text."""
    layout, scores = clear_scores("rand_voca", "official", seed=4)
    path = tmp_path / "board_rand_voca.npy"
    np.save(path, scores.astype(np.float16))
    page.goto(page.url, wait_until="load")  # a fresh session: the earlier tests' uploads and layouts are gone
    page.get_by_role("button", name="Evaluate", exact=True).wait_for()
    _upload_and_evaluate(page, path)
    page.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
    page.get_by_text("Submit this evaluation to the leaderboard").click()
    precision = page.locator("#submit-precision input")
    page.wait_for_function("input => input.value === 'fp16'", arg=precision.element_handle())  # from the upload
    page.locator("#submit-model textarea, #submit-model input").first.fill("<i>browser</i> model")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_function("() => document.querySelector('#submit-message textarea').value"
                           ".startsWith('added <i>browser</i> model to the board; on the board it fills clean i2t, "
                           "rand voca; mean text is blank')")
    page.get_by_role("tab", name="Leaderboard").click()
    page.locator("#leaderboard-view").get_by_label("text attacks", exact=True).check()
    row = page.locator("#leaderboard-table").get_by_role("row").filter(has_text="<i>browser</i> model")
    row.wait_for()  # the name as text: no markup made of it
    expected = rococo_recall(scores.astype(np.float16), **layout.metric_inputs())
    row.filter(has_text=f"{expected['recall@1']:.2f}").wait_for()  # the text attacks' columns are shown
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-leaderboard.png"), full_page=True)
    cells = row.inner_text().split("\n")  # the columns (gradio_client's test checks each by its header)
    assert any(cell.startswith("submitted 20") for cell in cells) and "fp16" in cells
    assert page.locator("#leaderboard-table").get_by_role("row").filter(has_text="BLIP (paper v5)").count() == 1
    assert not _errors(page), _errors(page)


def test_the_leaderboard_reads_at_1280_px(page):
    """Issue 31: short headers (a header about 450 px tall pushed every row below the fold), the first row visible
    without scrolling, the sources as links, sortable from a header's menu; each group of columns fits the page."""
    page.goto(page.url, wait_until="load")
    page.get_by_role("tab", name="Leaderboard").click()
    board = page.locator("#leaderboard-table")
    rows = board.get_by_role("row")
    rows.filter(has_text="BLIP (paper v5)").wait_for()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-leaderboard-1280.png"))
    header = board.locator("thead").bounding_box()
    first = rows.nth(1).bounding_box()
    print(f"\nleaderboard header {header['height']:.0f} px tall; first row from {first['y']:.0f} to "
          f"{first['y'] + first['height']:.0f} px of {VIEWPORT['height']}")
    assert header["height"] < 80  # two lines of header text, no one-letter-per-line wrapping
    assert first["y"] + first["height"] <= VIEWPORT["height"]  # in the viewport, without scrolling
    assert page.evaluate("() => window.scrollY") == 0
    link = board.get_by_role("link", name="arXiv:2304.10727v5").first
    assert link.get_attribute("href") == "https://arxiv.org/abs/2304.10727v5"
    for view in ("means", "text attacks", "image attacks"):
        page.locator("#leaderboard-view").get_by_label(view, exact=True).check()
        page.wait_for_function("n => document.querySelectorAll('#leaderboard-table thead th').length === n",
                               arg=len(BOARD_VIEWS[view]))
        widths = page.evaluate("() => [document.querySelector('#leaderboard-table table').scrollWidth, "
                               "document.querySelector('#leaderboard-table').clientWidth]")
        assert widths[0] <= widths[1], (view, widths)  # no sideways scrolling
        assert board.locator("thead").bounding_box()["height"] < 80, view
    page.locator("#leaderboard-view").get_by_label("means", exact=True).check()
    column = BOARD_VIEWS["means"].index("clean i2t")
    board.get_by_role("columnheader").nth(column).hover()
    board.get_by_role("columnheader").nth(column).get_by_role("button", name="Open cell menu").click()
    page.get_by_role("menuitem", name="Sort ascending").click()
    values = [rows.nth(i).get_by_role("gridcell").nth(column).inner_text().strip() for i in range(1, rows.count())]
    numbers = [float(value) for value in values if value]
    assert len(numbers) >= 5 and numbers == sorted(numbers), values
    assert not _errors(page), _errors(page)


def test_the_synthetic_example_shows_every_output(page):
    """Issue 31: one button, nothing uploaded: results (with n/a where no attack exists), chart, flipped queries, the
    by-word and by-method tables, Compare. Issue 39: the results come into view at 1280 x 900 (they begin about
    1,100 px below the button), under a legend of what the numbers are; Compare spells the directions and the clean
    rows as the results do; the by-word rates have two decimals; refused on submission, the board stays as it was."""
    page.goto(page.url, wait_until="load")
    assert not page.locator("#results-table").is_visible()  # no empty table with placeholder headers before
    board_before = _board_rows(page)
    page.get_by_role("tab", name="Evaluate").click()
    page.get_by_role("button", name="Try the synthetic example").click()
    page.locator("#results-table").get_by_role("row").filter(has_text="synthetic_patch_seed1").wait_for()
    headers, rows = _table(page, "#results-table")
    first_number = page.locator("#results-table").get_by_role("row").nth(1).get_by_role("gridcell").nth(
        headers.index("R@1"))
    _wait_in_viewport(page, first_number)
    chart = page.locator("#recall-chart img")
    chart.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=chart.element_handle())
    assert "synthetic demo model — not a real model" in page.locator("#evaluate-message").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-example-viewport.png"))  # what the user sees after the click
    shown = [dict(zip(headers, row)) for row in rows]
    assert [row["attack success"] for row in shown if row["attack"] == "clean"] == ["n/a", "n/a"]
    legend = page.locator("#results-legend")
    assert legend.is_visible() and "percent" in legend.inner_text() and "false rate" in legend.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-example.png"), full_page=True)
    page.get_by_role("tab", name="What fooled the model").click()
    page.locator("#flipped-note").get_by_text("flipped queries (same_concept/image_to_text:").wait_for()
    assert page.locator("#flipped-queries table.rococo-flipped tr").count() == 10
    word_headers, words = _table(page, "#word-table")
    _, methods = _table(page, "#image-attack-table")
    assert {row[0] for row in words} == {"same_concept", "diff_concept"} and methods[0][0] == "mix"
    rates = [row[word_headers.index("success rate (%)")] for row in words]
    assert all(re.fullmatch(r"\d+\.\d\d", rate) for rate in rates), rates  # 25.00, not 25
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("row").filter(has_text="synthetic demo model").first.wait_for()
    compared = _records(page, "#compare-table")
    mine = [row for row in compared if row["model"] == "synthetic demo model — not a real model"]
    assert [row["direction"] for row in mine[:2]] == ["image-to-text", "image-to-text"]
    clean_false_rates = [row["false rate"] for row in compared if row["attack"] == "clean"]
    assert clean_false_rates == ["n/a"] * 3  # CLIP's and the example's two
    assert not _errors(page), _errors(page)

    _submit(page, "synthetic")  # refused: the example is no model
    refusal = page.locator("[data-testid=toast-body].error")
    refusal.get_by_text("the last evaluation is the synthetic example").wait_for()
    assert _board_rows(page) == board_before


def test_a_benchmark_space_names_its_benchmark_and_keeps_its_board(page, tmp_path):
    """Issue 39: a Space serving a generated benchmark says so in its title and intro, not RoCOCO; its refusal of a
    submission leaves the board as it was (no blank board with an "Error" badge)."""
    class Benchmark(TinySource):
        is_rococo, card_dataset = False, ("rococo-generated", "RoCOCO-style benchmark: dogs")

    demo = app.build_app(source=Benchmark(DECIDING_CAPTIONS), output_dir=tmp_path / "outputs",
                         leaderboard_db=tmp_path / "board.sqlite3")
    url = serve(demo)
    layout, scores = clear_scores("rand_voca", "official", seed=3)
    path = tmp_path / "bench_rand_voca.npy"
    np.save(path, scores)
    fresh = page.context.browser.new_page(viewport=VIEWPORT)  # the module's browser
    try:
        fresh.set_default_timeout(TIMEOUT_MS)
        fresh.goto(url, wait_until="load")
        fresh.wait_for_function("() => document.title !== ''")
        assert fresh.title() == "RoCOCO-style benchmark: dogs — robustness evaluation"
        heading = fresh.get_by_role("heading", level=1).first.inner_text()
        assert "RoCOCO-style benchmark: dogs" in heading and "RoCOCO:" not in heading
        board_before = _board_rows(fresh)
        fresh.get_by_role("tab", name="Evaluate").click()
        _upload_and_evaluate(fresh, path)
        fresh.locator("#results-table").get_by_role("row").filter(has_text=path.name).wait_for()
        _submit(fresh, "benchmark model")
        refusal = fresh.locator("[data-testid=toast-body].error")
        refusal.get_by_text("this Space serves a generated benchmark").wait_for()
        assert _board_rows(fresh) == board_before
    finally:
        fresh.close()
        demo.close()


def test_a_page_load_shows_the_board_of_now(page, tmp_path):
    """Rows added after the server started (here by another process's board on the same database) are on the
    Leaderboard tab when a page loads, before any Refresh (issue 29: the page showed the board of server start), and
    the line under the board counts them."""
    from rococo_eval.board.leaderboard import Leaderboard, rococo_galleries

    database = tmp_path / "board.sqlite3"
    demo = app.build_app(source=TinySource(DECIDING_CAPTIONS), output_dir=tmp_path / "outputs",
                         leaderboard_db=database)
    url = serve(demo)
    try:
        layout, scores = clear_scores("rand_voca", "official", seed=8)
        row = {"attack": "rand_voca", "direction": "image_to_text", "num_queries": layout.num_queries,
               "num_gallery": layout.num_gallery, **rococo_recall(scores, **layout.metric_inputs())}
        other = Leaderboard(database, galleries=rococo_galleries(DECIDING_CAPTIONS))
        assert other.submit(typed_rows([row]), model="added elsewhere")[0]
        fresh = page.context.browser.new_page(viewport=VIEWPORT)  # the module's browser
        try:
            fresh.set_default_timeout(TIMEOUT_MS)
            fresh.goto(url, wait_until="load")
            fresh.get_by_role("tab", name="Leaderboard").click()
            board = fresh.locator("#leaderboard-table").get_by_role("row")
            board.filter(has_text="added elsewhere").wait_for()
            assert board.filter(has_text=f"{row['clean_recall@1']:.2f}").count() == 1  # its clean i2t
            # issue 41: the line under the board says how many rows it shows and that this board is the Space's file
            status = fresh.locator("#leaderboard-status")
            status.get_by_text("Rows 1-6 of 6 (page 1 of 1).").wait_for()
            assert "a restart of a Space without persistent storage loses it" in status.inner_text()
            assert not _errors(fresh), _errors(fresh)
        finally:
            fresh.close()
    finally:
        demo.close()
