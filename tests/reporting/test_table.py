"""rococo_eval.reporting.table and ``rococo-eval table``: reports of two real runs in one comparison."""

import csv
import io
import json
import shutil
import subprocess
import sys

import pytest

from rococo_eval.cli import main
from rococo_eval.reporting.table import comparison, read_reports


@pytest.fixture(scope="module")
def reports(hf_name, open_clip_name, benchmark, tmp_path_factory):
    """The reports of a tiny CLIP (transformers) and a tiny open_clip model: two text and two image attacks."""
    folder = tmp_path_factory.mktemp("reports")
    for number, name in enumerate([hf_name, open_clip_name]):
        assert main(["run", "--model", name, "--benchmark", str(benchmark), "--attacks", "rand_voca,danger,mix_seed1,mix_seed7",
                     "--cache-dir", str(folder / "cache"), "--out", str(folder / f"model-{number}"), "--quiet"]) == 0
    return [folder / "model-0", folder / "model-1"]


def test_the_table_holds_every_gallerys_r1_of_every_report(reports, tmp_path, capsys):
    assert main(["table", *map(str, reports), "--out", str(tmp_path), "--quiet"]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "table.csv").read_text())))
    assert list(rows[0]) == ["model", "report", "clean/image_to_text", "rand_voca/image_to_text",
                             "danger/image_to_text", "clean/text_to_image", "mix_seed1/text_to_image",
                             "mix_seed7/text_to_image", "mix/text_to_image"]
    for row, folder in zip(rows, reports):
        summary = json.loads((folder / "report.json").read_text())["summary"]
        expected = {f"{line['attack']}/{line['direction']}": line["recall@1"] for line in summary}
        assert row["report"] == str(folder)
        assert {key: float(value) for key, value in row.items() if "/" in key} == pytest.approx(expected, abs=0)
        mean = [line for line in summary if line["attack"] == "mix"][0]
        assert mean["seeds"] == [1, 7] and float(row["mix/text_to_image"]) == mean["recall@1"]
    markdown = (tmp_path / "table.md").read_text()
    assert "| model | clean (i2t) | rand_voca (i2t) |" in markdown and "mix (t2i, seed mean)" in markdown
    assert markdown.count("\n| ") == 3 and (tmp_path / "table.png").read_bytes()[:4] == b"\x89PNG"
    assert "| model | clean (i2t)" in capsys.readouterr().out


def test_a_model_in_two_reports_is_told_apart_by_its_folder(reports, tmp_path):
    shutil.copy(reports[0] / "report.json", tmp_path / "report.json")
    _, rows = comparison(read_reports([reports[0], reports[0] / "report.json", tmp_path]))
    assert len(rows) == 2 and rows[0]["model"].endswith(f"({reports[0]})") and rows[1]["model"].endswith(
        f"({tmp_path})")


def test_a_gallery_that_a_report_lacks_is_left_empty(reports, tmp_path):
    document = json.loads((reports[0] / "report.json").read_text())
    document["summary"] = [row for row in document["summary"] if row["attack"] != "danger"]
    (tmp_path / "report.json").write_text(json.dumps(document))
    columns, rows = comparison(read_reports([tmp_path, reports[1]]))
    assert "danger/image_to_text" in columns and "danger/image_to_text" not in rows[0]


@pytest.mark.parametrize("content, problem", [
    (None, "holds no report.json: give folders that `rococo-eval run` or `score` wrote"),
    ("{", "cannot read the report"),
    ('{"results": {}}', "is not a RoCOCO report: it has no `summary` list"),
])
def test_what_is_not_a_report_is_refused_by_name(tmp_path, capsys, content, problem):
    if content is not None:
        (tmp_path / "report.json").write_text(content)
    assert main(["table", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert problem in error and str(tmp_path) in error and not (tmp_path / "out" / "table.csv").exists()


def test_the_warnings_of_the_reports_come_with_their_numbers(tmp_path):
    """Issue 39, item 2: a report's warnings about its numbers (files that disagree, ...) were dropped by the
    comparison of its numbers; `table` says them on stderr, --quiet or not, and table.md lists them."""
    warning = "the files disagree: image-to-text: the clean R@1 differs between files"
    for name, warnings in (("warned", [warning]), ("clean", [])):
        (tmp_path / name).mkdir()
        meta = {"model": name, **({"warnings": warnings} if warnings else {})}
        summary = [{"attack": "clean", "direction": "image_to_text", "recall@1": 50.0}]
        (tmp_path / name / "report.json").write_text(json.dumps({"meta": meta, "summary": summary}))
    done = subprocess.run([sys.executable, "-m", "rococo_eval", "table", str(tmp_path / "warned"),
                           str(tmp_path / "clean"), "--out", str(tmp_path / "table"), "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"rococo-eval: warning: {tmp_path / 'warned'}: {warning}\n"
    assert (tmp_path / "table" / "table.md").read_text().startswith(
        f"# RoCOCO comparison: R@1 (%)\n\n## Warnings\n\n- {tmp_path / 'warned'}: {warning}\n\n| model |")
