"""Compact score files end to end (issue 23, item 3): ``run --save-scores DIR --compact-scores`` writes a re-ranker's
galleries as compact files, and ``rococo-eval score`` and the Space give the run's report from them; bad files and
bad requests are refused by name."""

import json

import numpy as np
import pytest

from rococo_eval.cli import main
from rococo_eval.io.savedscores import score_file_name, write_top_k
from rococo_eval.io.scorefiles import read_header, read_top_k

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ATTACKS = "rand_voca,mix_seed1"
K = 3  # fewer re-ranked candidates than R@5 and R@10 ask for: the report bounds what the -100 block decides


@pytest.fixture(scope="module")
def compact_run(blip_name, benchmark, tmp_path_factory):
    """A tiny BLIP's run on the generated benchmark, its galleries saved as compact files."""
    folder = tmp_path_factory.mktemp("compact")
    assert main(["run", "--model", blip_name, "--benchmark", str(benchmark), "--attacks", ATTACKS,
                 "--cache-dir", str(folder / "cache"), "--out", str(folder / "run"), "--rerank-k", str(K),
                 "--save-scores", str(folder / "scores"), "--compact-scores", "--device", "cpu", "--quiet"]) == 0
    return folder


def report(folder):
    return json.loads((folder / "report.json").read_text())


def test_run_writes_one_compact_file_per_gallery_and_bounds_what_the_fill_decides(compact_run):
    names = sorted(path.name for path in (compact_run / "scores").iterdir())
    assert names == sorted(score_file_name(attack, direction, K) for attack, direction in [
        ("clean", "image_to_text"), ("clean", "text_to_image"), ("rand_voca", "image_to_text"),
        ("mix_seed1", "text_to_image")])
    ran = report(compact_run / "run")
    assert ran["meta"]["compact_scores"] is True and ran["meta"]["rerank"]["k"] == K
    for key, output in ran["results"].items():
        info = read_header(compact_run / "scores" / score_file_name(*key.split("/"), K))
        assert info.candidates == K and info.shape == (output["num_queries"], output["num_gallery"])
        assert "recall@1_bounds" not in output  # K >= 1 candidates above -100: the top item is always decided
        low, high = output["recall@10_bounds"]  # a correct item outside the top 3 may rank anywhere after them
        assert low == output["recall@10"] < high  # the number is the pessimistic order's
    markdown = (compact_run / "run" / "report.md").read_text()
    assert " to " in markdown and "what the order of a re-ranker's -100 block decides" in markdown


def test_score_gives_the_run_report_from_the_compact_files(compact_run, benchmark, tmp_path):
    files = sorted(str(path) for path in (compact_run / "scores").iterdir())
    assert main(["score", *files, "--benchmark", str(benchmark), "--out", str(tmp_path / "score"), "--quiet"]) == 0
    scored, ran = report(tmp_path / "score"), report(compact_run / "run")
    assert scored["results"] == ran["results"] and scored["summary"] == ran["summary"]
    assert all(entry["candidates"] == K for entry in scored["meta"]["files"].values())
    assert (tmp_path / "score" / "per_query.parquet").exists()


def test_the_space_scores_the_compact_files_as_run_does(compact_run, benchmark, tmp_path):
    """The Space served for real, the compact files uploaded through gradio_client."""
    import app
    from gradio_client import Client, handle_file

    from helpers.space_app import serve
    from rococo_eval.data.source import open_source

    demo = app.build_app(source=open_source(benchmark=benchmark), output_dir=tmp_path / "outputs")
    files = [handle_file(path) for path in sorted((compact_run / "scores").iterdir())]
    try:
        client = Client(serve(demo), verbose=False)
        message, _, _, download = client.predict(files, {"headers": app.LAYOUT_HEADERS, "data": []},
                                                 api_name="/evaluate")
    finally:
        demo.close()
    scored, ran = json.loads(open(download).read()), report(compact_run / "run")
    assert f"compact: top {K} per query" in message
    assert scored["results"] == ran["results"] and scored["summary"] == ran["summary"]


def test_compact_scores_are_refused_without_save_scores_and_for_a_dual_encoder(hf_name, benchmark, tmp_path, capsys):
    common = ["--benchmark", str(benchmark), "--attacks", "rand_voca", "--cache-dir", str(tmp_path / "cache"),
              "--out", str(tmp_path / "out"), "--quiet"]
    assert main(["run", "--model", hf_name, *common, "--compact-scores"]) == 1
    assert "--compact-scores says how --save-scores writes" in capsys.readouterr().err
    assert main(["run", "--model", hf_name, *common, "--compact-scores", "--save-scores", str(tmp_path / "s")]) == 1
    error = capsys.readouterr().err
    assert "is a dual encoder" in error and "save its full matrices" in error
    assert not list((tmp_path / "s").glob("*")) if (tmp_path / "s").exists() else True
    assert not (tmp_path / "out" / "report.json").exists()


def write_compact(path, **changes):
    arrays = {"top_columns": np.array([[1, 0], [0, 2]], dtype=np.int32),
              "top_scores": np.array([[2.0, 1.0], [3.0, 0.5]], dtype=np.float32),
              "fill": np.float32(-100), "num_gallery": np.int64(3)}
    arrays.update(changes)
    np.savez(path, **{name: value for name, value in arrays.items() if value is not None})
    return path


@pytest.mark.parametrize("changes, problem", [
    ({"fill": None}, "a compact score file holds top_columns, top_scores, fill, num_gallery; this one lacks fill"),
    ({"top_columns": np.array([[1.0, 0.0], [0.0, 2.0]])}, "`top_columns` must be a non-empty 2-D matrix of ints"),
    ({"top_scores": np.ones((2, 3), dtype=np.float32)}, "`top_scores` must be floats of the shape of `top_columns`"),
    ({"num_gallery": np.int64(1)}, "`num_gallery` is 1, fewer than the 2 candidates listed per query"),
    ({"num_gallery": np.float32(3)}, "`num_gallery` must be one int"),
    ({"fill": np.ones(2, dtype=np.float32)}, "`fill` must be one number"),
])
def test_a_bad_compact_file_is_refused_by_name(tmp_path, changes, problem):
    path = write_compact(tmp_path / "clean_text_to_image_top2.npz", **changes)
    with pytest.raises(ValueError, match=f"clean_text_to_image_top2.npz: {problem}"):
        read_header(path)


def test_a_file_with_a_full_and_a_compact_matrix_is_refused(tmp_path):
    """Which of the two to score would be a guess that changes every number."""
    path = write_compact(tmp_path / "both.npz", scores=np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="both.npz: holds a full score matrix .scores. and a compact one"):
        read_header(path)


def test_a_compact_file_with_a_repeated_column_is_refused_when_scored(tmp_path):
    from rococo_eval.data.facts import NO_SOURCE
    from rococo_eval.scoring.plan import PlanError, PlanPolicy, ScoreRequest, plan_score_files, score_planned

    path = write_compact(tmp_path / "scores.npz", top_columns=np.array([[1, 1], [0, 2]], dtype=np.int32),
                         references=np.array([1, 2]))
    plans = plan_score_files([ScoreRequest(path, attack="custom", direction="text_to_image")], NO_SOURCE,
                             PlanPolicy(custom=True))
    with pytest.raises(PlanError, match=r"scores.npz: `top_columns\[0\]` lists column 1 twice"):
        score_planned(plans)


def test_compact_files_round_trip_in_both_formats(tmp_path):
    columns, scores = np.array([[4, 0, 2]]), np.array([[0.5, 0.25, 0.125]], dtype=np.float32)
    for suffix in (".npz", ".safetensors"):
        path = write_top_k(tmp_path / f"g{suffix}", columns, scores, -100.0, 5)
        compact = read_top_k(path)
        assert compact.shape == (1, 5) and compact.fill == -100.0
        assert compact[np.array([[0]]), np.arange(5)[None]].tolist() == [[0.25, -100.0, 0.125, -100.0, 0.5]]
    with pytest.raises(ValueError, match="a compact score file is an .npz or a .safetensors file"):
        write_top_k(tmp_path / "g.npy", columns, scores, -100.0, 5)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["g.npz", "g.safetensors"]


def test_write_top_k_refuses_columns_outside_the_gallery_and_keeps_bfloat16_exact(tmp_path):
    import ml_dtypes

    with pytest.raises(ValueError, match=r"g.npz: `top_columns` must be gallery columns from 0 to 3, got 0 to 7"):
        write_top_k(tmp_path / "g.npz", [[7, 0]], np.array([[1.0, 0.5]], dtype=np.float32), -100.0, 4)
    assert not list(tmp_path.iterdir())
    scores = np.array([[1.5, 0.25]], dtype=ml_dtypes.bfloat16)
    compact = read_top_k(write_top_k(tmp_path / "g.npz", [[3, 0]], scores, -100.0, 4))
    assert compact.top_scores.dtype == np.float32 and compact.top_scores.tolist() == [[1.5, 0.25]]
