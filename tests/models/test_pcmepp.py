"""rococo_eval.models.pcmepp: ``pcmepp:FOLDER`` gets everything ``run`` gives a dual encoder (report, embeddings file
scored by ``score`` and by the Space, torchrun processes), from a folder or the Hugging Face cache; configurations it
does not build and weights that do not fit are refused by name.

Parity with the official code is ``test_pcmepp_official.py``'s; these checkpoints are written here as
``save_pretrained`` writes them (:func:`helpers.tiny_models.make_tiny_pcmepp`)."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from rococo_eval.cli import main
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.models.adapters import ModelError, load_model
from rococo_eval.models.pcmepp import read_config
from rococo_eval.models.similarity import CSD
from helpers import REPO_ROOT
from helpers.hostile_checkpoints import nested_json, pcmepp_with_config, pcmepp_with_config_text
from helpers.tiny_models import TINY_PCMEPP, make_tiny_pcmepp


@pytest.fixture(scope="module")
def pcmepp_name(tmp_path_factory):
    return make_tiny_pcmepp(tmp_path_factory.mktemp("pcmepp") / "PCMEPP-tiny")


@pytest.fixture(scope="module")
def ran(pcmepp_name, benchmark, tmp_path_factory):
    """A run of every attack: its report and its embeddings file."""
    folder = tmp_path_factory.mktemp("pcmepp-run")
    assert main(["run", "--model", pcmepp_name, "--benchmark", str(benchmark), "--device", "cpu", "--cache-dir",
                 str(folder / "cache"), "--save-embeddings", str(folder / "model.safetensors"), "--save-scores",
                 str(folder / "scores"), "--out", str(folder / "report"), "--batch-size", "4", "--quiet"]) == 0
    return folder


def _report(folder):
    return json.loads((folder / "report.json").read_text())


@pytest.mark.slow
def test_run_writes_a_full_report_scored_by_csd(pcmepp_name, ran, benchmark):
    """Every gallery, the failure analysis, ``similarity: csd``; the clean image-to-text matrix is the CSD of the
    model's own means and log sigmas."""
    report = _report(ran / "report")
    source = BenchmarkSource(benchmark)
    assert len(report["results"]) == 2 + len(source.text_attacks) + len(source.image_attacks)
    assert report["meta"]["similarity"] == "csd" and (ran / "report" / "per_query.parquet").is_file()
    model = load_model(pcmepp_name, device="cpu")
    images = np.stack([model.preprocess_image(source.original_image(i)) for i in range(source.num_images)])
    image_means, image_sigmas = model.encode_pixels(images)
    text_means, text_sigmas = model.encode_tokens(model.tokenize_texts(source.ground_truth_captions()))
    csd = -(2 - 2 * image_means.astype(np.float64) @ text_means.T
            + np.exp(image_sigmas.astype(np.float64)).sum(1)[:, None] + np.exp(text_sigmas.astype(np.float64)).sum(1))
    saved = np.load(ran / "scores" / "clean_image_to_text_official_order.npy")
    np.testing.assert_allclose(saved, csd, rtol=1e-5, atol=1e-4)
    assert (np.argsort(-saved, axis=1) == np.argsort(-csd, axis=1)).all()


@pytest.mark.slow
def test_the_embeddings_file_scores_as_run_through_score_and_the_space(ran, benchmark, tmp_path):
    """The file keeps the CSD rows as they are (``similarity: csd``, not normalised); ``rococo-eval score`` and the
    real Space (through gradio_client) give run's results."""
    import app
    from gradio_client import Client, handle_file
    from safetensors import safe_open

    from helpers.space_app import serve
    from rococo_eval.data.source import open_source

    with safe_open(str(ran / "model.safetensors"), "np") as handle:
        assert handle.metadata()["similarity"] == "csd" and handle.metadata()["normalized"] == "false"
    assert main(["score", str(ran / "model.safetensors"), "--benchmark", str(benchmark), "--out",
                 str(tmp_path / "scored"), "--quiet"]) == 0
    run_report = _report(ran / "report")
    assert _report(tmp_path / "scored")["results"] == run_report["results"]
    demo = app.build_app(source=open_source(benchmark=benchmark), output_dir=tmp_path / "outputs")
    try:
        client = Client(serve(demo), verbose=False)
        _, _, _, download = client.predict([handle_file(ran / "model.safetensors")],
                                           {"headers": app.LAYOUT_HEADERS, "data": []}, api_name="/evaluate")
    finally:
        demo.close()
    scored = json.loads(open(download).read())
    assert scored["results"] == run_report["results"] and scored["meta"]["similarity"] == "csd"


@pytest.mark.slow
def test_two_processes_give_the_report_of_one(pcmepp_name, ran, benchmark, tmp_path):
    """``torchrun --nproc-per-node 2`` (gloo, CPU): the same report.json bytes as one process."""
    one = tmp_path / "one"
    assert main(["run", "--model", pcmepp_name, "--benchmark", str(benchmark), "--cache-dir", str(one / "cache"),
                 "--out", str(one / "report"), "--batch-size", "4", "--quiet"]) == 0
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "rococo_eval",
               "run", "--model", pcmepp_name, "--benchmark", str(benchmark), "--cache-dir", str(tmp_path / "cache"),
               "--out", str(tmp_path / "report"), "--batch-size", "4", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "report" / "report.json").read_bytes() == (one / "report" / "report.json").read_bytes()


def test_the_outputs_are_csd_rows_of_normalised_means(pcmepp_name):
    from PIL import Image

    model = load_model(pcmepp_name, device="cpu")
    assert model.similarity is CSD
    images = [Image.new("RGB", (300, 200), (200, 30, 30)), Image.new("L", (120, 260), 90)]
    means, sigmas = model.encode_pixels(np.stack([model.preprocess_image(image) for image in images]))
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 1, atol=1e-6)
    rows = model.encode_images(images)
    np.testing.assert_array_equal(rows[:, :-1], means)  # the means, then the uncertainty sum(exp(std))
    np.testing.assert_allclose(rows, CSD.rows("image", (means, sigmas), "m"), rtol=1e-6)
    tokens = model.tokenize_texts(["a red square", "a grey field"])
    assert tokens.shape == (2, 77) and int(tokens[0, 0]) == 49406  # <start_of_text>
    texts = model.encode_texts(["a red square", "a grey field"])
    assert texts.shape == (2, TINY_PCMEPP["embed_dim"] + 1)


def test_the_weights_may_be_a_torch_file_and_come_from_the_hub_cache(tmp_path, monkeypatch):
    """``pytorch_model.bin`` (read with weights_only) loads as ``model.safetensors`` does; a Hub id is read from the
    Hugging Face cache offline, through huggingface_hub's own snapshot_download."""
    torch_file = load_model(make_tiny_pcmepp(tmp_path / "bin", weights="pytorch_model.bin"), device="cpu")
    safetensors = load_model(make_tiny_pcmepp(tmp_path / "st"), device="cpu")
    assert torch_file.fingerprint == safetensors.fingerprint
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--pcmepp-tiny" / "snapshots" / ("a" * 40)
    make_tiny_pcmepp(snapshot)
    (cache / "models--org--pcmepp-tiny" / "refs").mkdir()
    (cache / "models--org--pcmepp-tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    from_hub = load_model("pcmepp:org/pcmepp-tiny", device="cpu")
    assert from_hub.fingerprint == safetensors.fingerprint
    with pytest.raises(ModelError, match=r"`model` 'pcmepp:org/absent': cannot get the Hub repository 'org/absent'"):
        load_model("pcmepp:org/absent", device="cpu")


@pytest.mark.parametrize("change, problem", [
    ({"vision_cfg": {**TINY_PCMEPP["vision_cfg"], "attentional_pool": True}},
     "vision_cfg.attentional_pool = True is not supported"),
    ({"text_cfg": {**TINY_PCMEPP["text_cfg"], "embed_cls": True}}, "text_cfg.embed_cls = True is not supported"),
    ({"text_cfg": {**TINY_PCMEPP["text_cfg"], "rope": True}},
     "text_cfg has fields the official dataclass does not have: rope"),
    ({"init_logit_bias": -10}, "has fields HfPCMEPPModel does not take: init_logit_bias"),
    ({"cast_dtype": "float16"}, "cast_dtype = 'float16' is not supported"),
    ({"vision_cfg": {**TINY_PCMEPP["vision_cfg"], "image_size": 256}}, "vision_cfg.image_size = 256; the official "
                                                                      "example preprocesses with"),
])
def test_configurations_it_does_not_build_are_refused_by_name(tmp_path, change, problem):
    name = make_tiny_pcmepp(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ModelError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_model(name, device="cpu")


def test_weights_that_do_not_fill_the_config_are_refused_by_name(tmp_path):
    name = make_tiny_pcmepp(tmp_path / "model")
    config = dict(TINY_PCMEPP, text_cfg={**TINY_PCMEPP["text_cfg"], "layers": 3})
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=r"the weights do not fill an HfPCMEPPModel of its config: missing "
                                         r"\['transformer.resblocks.2.attn.in_proj_bias'"):
        load_model(name, device="cpu")


@pytest.mark.parametrize("target, problem", [
    ("missing/folder/x", "no such folder, and not a Hub repository id"),
    ("empty", "lacks config.json"),
])
def test_a_folder_without_a_checkpoint_is_refused(tmp_path, target, problem):
    (tmp_path / "empty").mkdir()
    path = tmp_path / target
    with pytest.raises(ModelError, match=problem):
        load_model(f"pcmepp:{path}", device="cpu")


def test_read_config_keeps_the_official_defaults_but_not_where_the_official_code_has_none():
    config = read_config({"embed_dim": 512, "vision_cfg": {"patch_size": 16}, "text_cfg": {"unc_layers": 2}}, "m")
    assert config.vision["layers"] == 12 and config.vision["unc_layers"] == 2 and config.text["width"] == 512
    with pytest.raises(ValueError, match=r"text_cfg has no unc_layers, which HfPCMEPPModel.__init__ reads"):
        read_config({"embed_dim": 512, "vision_cfg": {}, "text_cfg": {}}, "m")


@pytest.mark.parametrize("generate, field", [
    (lambda folder: pcmepp_with_config(folder, vision={"patch_size": 0}),
     "vision_cfg.patch_size = 0 is out of bounds: an int from 1 to 224"),
    (lambda folder: pcmepp_with_config(folder, vision={"head_width": 0}), "vision_cfg.head_width = 0 is out of"),
    (lambda folder: pcmepp_with_config(folder, text={"heads": 3}),
     "text_cfg.heads = 3 gives 3 attention heads, which do not split text_cfg.width = 32"),
    (lambda folder: pcmepp_with_config(folder, text={"unc_layers": 3}), "text_cfg.unc_layers = 3 is out of bounds: "
                                                                        "an int from 0 to 2"),
    (lambda folder: pcmepp_with_config(folder, embed_dim="16"), "embed_dim = '16' is out of bounds"),
    (lambda folder: pcmepp_with_config_text(folder, nested_json(100_000)),
     "its config '.*config.json': the config JSON nests 100001 deep, deeper than its 3"),
])
def test_configurations_out_of_bounds_are_refused_before_building_by_field(tmp_path, generate, field):
    """Each was a traceback (ZeroDivisionError, RecursionError, ValueError, an assertion of torch); now one line
    naming the checkpoint and the field."""
    name = generate(tmp_path / "model")
    with pytest.raises(ModelError, match=f"^`model` '{re.escape(name)}'.*{field}") as refused:
        load_model(name, device="cpu")
    assert "\n" not in str(refused.value)
