"""The docs' generated parts (docs/hooks.py) say what the code says, and the pages read well in chromium at 1280 px.

``make test`` builds the site itself too; the browser tests build it once more, into a temporary folder (7 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import load_script
from helpers.chromium import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT

ROOT = Path(__file__).resolve().parents[1]
# A fenced code block of a Markdown page, indented as far as its fence (in a list item, say).
FENCE = re.compile(r"^( *)(`{3,}|~{3,})[^\n]*\n(.*?)^\1\2 *$", re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def hooks():
    return load_script(ROOT / "docs" / "hooks.py")


def test_the_refused_inputs_table_gives_the_metrics_own_message_for_each_case(hooks):
    from rococo_recall import rococo_recall

    cases = hooks.load_metric_cases()
    table = hooks.refused_inputs_table()
    assert len(hooks.refused_inputs()) == len(cases.BAD_INPUTS)
    for overrides, _ in cases.BAD_INPUTS:
        with pytest.raises(ValueError) as caught:
            rococo_recall(**{**hooks.BASE_CALL, **overrides})
        assert hooks.prose(str(caught.value)) in table


@pytest.mark.parametrize("case, message", [
    ((dict(k=0), "`k` must be something else"), "the tests expect"),
    ((dict(k=1), "accepted"), "the metric accepted"),
])
def test_a_case_the_metric_answers_otherwise_fails_the_build(hooks, monkeypatch, case, message):
    monkeypatch.setattr(hooks, "load_metric_cases", lambda: type("Cases", (), {"BAD_INPUTS": [case]}))
    with pytest.raises(ValueError, match=message):
        hooks.refused_inputs()


def test_every_module_of_the_package_is_in_a_layer(hooks):
    assert hooks.unlayered_modules() == []
    listed = [module for layer in hooks.layers() for name in layer for module in hooks.modules_of(name)]
    assert "rococo_eval.io.atomic" in listed and "rococo_eval.catalog" in listed
    assert len(listed) == len(set(listed))


def test_the_layers_are_real_modules_listed_bottom_first(hooks):
    """Each layer names modules of the package, and a layer imports only from itself and the layers before it."""
    import grimp

    graph = grimp.build_graph("rococo_eval", cache_dir=None)
    below: set[str] = set()
    for layer in hooks.layers():
        assert set(layer) <= graph.modules, f"{layer}: not modules of the package"
        modules = set().union(*({name} | graph.find_descendants(name) for name in layer))
        imported = set().union(*(graph.find_modules_directly_imported_by(module) for module in modules))
        assert imported & graph.modules <= below | modules, f"{layer} imports from a module of no layer below it"
        below |= modules


def test_a_page_that_lists_the_layers_in_another_order_fails(hooks):
    titles = [hooks.layer_title(layer) for layer in hooks.layers()]
    page = "\n".join(f"{number}. **{title}**: ..." for number, title in enumerate(titles, start=1))
    assert hooks.check_layer_order(page)
    titles[0], titles[-1] = titles[-1], titles[0]
    swapped = "\n".join(f"{number}. **{title}**: ..." for number, title in enumerate(titles, start=1))
    with pytest.raises(ValueError, match="contract"):
        hooks.check_layer_order(swapped)


def test_the_commands_help_is_generated_for_every_subcommand(hooks):
    text = hooks.rococo_eval_help()
    for command in ("rococo-eval run", "rococo-eval score", "rococo-eval attack"):
        assert f"`{command}`" in text and "usage: " + command in text
    assert "usage: rococo_dataset.py export" in hooks.rococo_dataset_help()


def test_markers_name_known_generators(hooks):
    markers = {name for page in (ROOT / "docs").rglob("*.md") for name in hooks.MARKER.findall(page.read_text())}
    assert markers and markers <= set(hooks.GENERATORS) | {"layer-order-check"}


def test_the_generated_help_fits_a_code_block(hooks):
    for text in (hooks.rococo_eval_help(), hooks.rococo_dataset_help()):
        wide = [line for line in text.splitlines() if len(line) > hooks.CODE_COLUMNS]
        assert not wide, f"{len(wide)} lines wider than {hooks.CODE_COLUMNS} characters: {wide[:3]}"


def test_a_help_line_that_argparse_cannot_wrap_is_wrapped_under_its_indent(hooks):
    text = "usage: rococo-eval run\n  --model SPEC  " + " ".join(["open_clip:ARCH/PRETRAINED"] * 6)
    lines = hooks.fit_code_width(text).splitlines()
    assert lines[:2] == ["usage: rococo-eval run", "  --model SPEC  open_clip:ARCH/PRETRAINED open_clip:ARCH/PRETRAINED"]
    assert all(len(line) <= hooks.CODE_COLUMNS for line in lines)
    assert all(line.startswith("    open_clip:") for line in lines[2:])
    assert " ".join(lines).split() == text.split()  # nothing lost


@pytest.mark.parametrize("page", sorted(path.name for path in (ROOT / "docs").glob("*.md")))
def test_the_code_blocks_written_in_the_pages_fit_the_column(hooks, page):
    """Every line of a page's own fenced code blocks fits (what a page includes from a file is that file's)."""
    markdown = (ROOT / "docs" / page).read_text(encoding="utf-8")
    wide = [line[len(indent):] for indent, _, body in FENCE.findall(markdown) for line in body.splitlines()
            if len(line) - len(indent) > hooks.CODE_COLUMNS]
    assert not wide, f"{page}: {len(wide)} code lines wider than {hooks.CODE_COLUMNS} characters: {wide[:3]}"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The docs site, built as ``make test`` builds it: the site ``make test`` has just built
    (``$ROCOCO_DOCS_SITE``), else one built here."""
    if os.environ.get("ROCOCO_DOCS_SITE"):
        built = Path(os.environ["ROCOCO_DOCS_SITE"])
        assert (built / "cli" / "index.html").is_file(), f"$ROCOCO_DOCS_SITE={built} holds no built docs site"
        return built
    folder = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(folder)],
                   cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    from playwright import sync_api

    assert CHROMIUM.exists(), "the docs' browser test needs Debian's chromium: `make test` installs it with apt-get"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _pages(site):
    return sorted(path.relative_to(site).as_posix() for path in site.rglob("index.html"))


def test_a_code_block_holds_a_line_of_the_docs_width_at_1280_px(hooks, site, browser):
    tab = browser.new_page(viewport=VIEWPORT)
    tab.goto((site / "cli" / "index.html").as_uri(), wait_until="load")
    tab.evaluate("document.fonts.ready")
    ARTIFACTS.mkdir(exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "docs-cli.png"), full_page=True)
    # How many characters a code block's line holds: its width inside the padding over a character's.
    fit = tab.evaluate("""() => {
        const code = document.querySelector('.md-typeset pre > code'), style = getComputedStyle(code);
        const probe = code.appendChild(document.createElement('span'));
        probe.textContent = 'x'.repeat(100);
        const character = probe.getBoundingClientRect().width / 100;
        probe.remove();
        return (code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)) / character;
    }""")
    tab.close()
    assert hooks.CODE_COLUMNS <= fit, f"a code block holds {fit:.1f} characters, the docs use {hooks.CODE_COLUMNS}"


def test_no_code_block_scrolls_sideways_at_1280_px(site, browser):
    """On the CLI page (its --help blocks) and every other page but the API reference's and harness.md, which
    shows the files of ``examples/`` whole."""
    pages = [page for page in _pages(site) if not page.startswith(("reference/", "harness/"))]
    assert "cli/index.html" in pages and "index.html" in pages
    scrolling, count = {}, 0
    tab = browser.new_page(viewport=VIEWPORT)
    for page in pages:
        tab.goto((site / page).as_uri(), wait_until="load")
        tab.evaluate("document.fonts.ready")
        blocks = tab.evaluate("""() => [...document.querySelectorAll('.md-typeset pre > code')].map(code =>
            ({first: code.textContent.split('\\n')[0], scroll: code.scrollWidth, client: code.clientWidth}))""")
        count += len(blocks)
        if any(block["scroll"] > block["client"] for block in blocks):
            scrolling[page] = [block for block in blocks if block["scroll"] > block["client"]]
    tab.close()
    assert count > 40  # the hand-written blocks, the docstrings' examples and a --help block per command
    assert not scrolling, scrolling


def test_no_name_in_a_table_breaks_across_lines_at_1280_px(site, browser):
    """A code span without a space in a table cell (``image_to_text``, ``'rococo-export'``) is on one line, on
    every page, the API reference included."""
    pages = _pages(site)
    assert "reproduce/index.html" in pages and "reference/harness/index.html" in pages
    broken, names = {}, 0
    tab = browser.new_page(viewport=VIEWPORT)
    for page in pages:
        tab.goto((site / page).as_uri(), wait_until="load")
        found = tab.evaluate("""() => {
            const names = [...document.querySelectorAll('.md-typeset td code')]
                .filter(code => !/\\s/.test(code.textContent));
            return {count: names.length,
                    broken: names.filter(code => code.getClientRects().length > 1).map(code => code.textContent)};
        }""")
        names += found["count"]
        if found["broken"]:
            broken[page] = found["broken"]
    tab.close()
    assert names > 100
    assert not broken, broken


def test_the_pages_name_each_column_as_the_tables_label_it():
    """Issue 39, item 7 (one spelling): a page names a results column as the tables and their legend label it
    (``r_mean``, not ``R_mean``)."""
    from rococo_eval.reporting.report import format_rows

    row = {"attack": "danger", "direction": "image_to_text", "clean_recall@1": 1.0, "clean_r_mean": 1.0,
           "recall@1": 1.0, "r_mean": 1.0, "false_rate": 1.0, "attack_success_rate": 1.0}
    labels = [label for label in format_rows([row])[0] if re.search(r"[_@]", label)]
    assert labels == ["clean R@1", "clean r_mean", "R@1", "r_mean"]
    misspelt = [(page.name, found.group(0)) for page in sorted((ROOT / "docs").glob("*.md")) for label in labels
                for found in re.finditer(rf"(?<![\w@]){re.escape(label)}(?![\w@])", page.read_text(), re.IGNORECASE)
                if found.group(0) != label]
    assert misspelt == []
