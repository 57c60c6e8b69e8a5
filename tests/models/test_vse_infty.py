"""rococo_eval.models.vse_infty: ``vse:PATH`` end to end on a generated benchmark (all three variants), and every
refusal: what the allowlist keeps out, the variants that are not scored, strict loading, region feature folders.

Parity with the official code is ``test_vse_infty_official.py``'s; these checkpoints are written here the official
way (:func:`helpers.tiny_models.save_vse_checkpoint`) from the project's own modules."""

import argparse
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from rococo_eval.cli import main
from rococo_eval.data.source import BenchmarkSource
from rococo_eval.models.adapters import ModelError, load_model
from rococo_eval.models.vse_infty import imageio_pixels
from helpers.hostile_checkpoints import (
    nested_json,
    vse_with_options,
    vse_with_settings,
    vse_with_settings_text,
    vse_with_text_weights,
)
from helpers.tiny_models import (
    make_tiny_vse,
    save_vse_checkpoint,
    tiny_vse_states,
    vse_options,
    write_region_features,
)


@pytest.fixture(scope="module")
def states():
    """The tiny WSL-grid model's options and state dicts."""
    opt = vse_options("wsl")
    return opt, *tiny_vse_states(opt)


@pytest.fixture(scope="module")
def region_folder(tmp_path_factory, benchmark):
    return write_region_features(tmp_path_factory.mktemp("regions"), BenchmarkSource(benchmark),
                                 np.random.default_rng(3))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["wsl", "detector", "region"])
def test_run_writes_a_full_report_for_each_variant(variant, benchmark, region_folder, tmp_path):
    """``rococo-eval run --model vse:PATH`` on a generated benchmark: every gallery, the failure analysis, the model's
    similarity; its embeddings file (dot products, kept as they are) scores to the same results through ``score``."""
    name = make_tiny_vse(tmp_path / "model", variant, region_features=region_folder if variant == "region" else None)
    assert main(["run", "--model", name, "--benchmark", str(benchmark), "--device", "cpu", "--cache-dir",
                 str(tmp_path / "cache"), "--save-embeddings", str(tmp_path / "model.safetensors"), "--out",
                 str(tmp_path / "report"), "--quiet"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    source = BenchmarkSource(benchmark)
    assert len(report["results"]) == 2 + len(source.text_attacks) + len(source.image_attacks)
    assert report["meta"]["similarity"] == "dot" and report["meta"]["model"] == name
    assert (tmp_path / "report" / "per_query.parquet").is_file() and (tmp_path / "report" / "report.md").is_file()
    recalls = [result["recall@1"] for result in report["results"].values()]
    assert len(set(recalls)) > 1  # the tiny model tells items apart
    assert main(["score", str(tmp_path / "model.safetensors"), "--benchmark", str(benchmark), "--out",
                 str(tmp_path / "scored"), "--quiet"]) == 0
    scored = json.loads((tmp_path / "scored" / "report.json").read_text())
    assert scored["results"] == report["results"] and scored["meta"]["similarity"] == "dot"


def test_the_region_variant_reads_the_features_of_each_image_set(benchmark, region_folder, tmp_path):
    """A region model's image embeddings are its encoder's of the features (rows put in the benchmark's order), and
    its cache is keyed by their bytes: other features, other embeddings."""
    from rococo_eval.models.cache import EmbeddingCache
    from rococo_eval.scoring.galleries import altered_images, original_images

    source = BenchmarkSource(benchmark)
    folder = tmp_path / "shuffled"
    folder.mkdir()
    order = np.random.default_rng(0).permutation(source.num_images)
    for name in ("original", source.image_attacks[0]):
        np.save(folder / f"{name}_ims.npy", np.load(region_folder / f"{name}_ims.npy")[order])
        ids = (region_folder / f"{name}_ids.txt").read_text().split("\n")
        (folder / f"{name}_ids.txt").write_text("".join(ids[index] + "\n" for index in order))
    model = load_model(make_tiny_vse(tmp_path / "model", "region", region_features=folder), device="cpu")
    cache = EmbeddingCache(tmp_path / "cache")
    originals = cache.embeddings(model, original_images(source))
    expected = model.encode_preprocessed(np.load(region_folder / "original_ims.npy"))
    np.testing.assert_allclose(originals, expected, atol=1e-6)
    altered = cache.embeddings(model, altered_images(source, source.image_attacks[0]))
    assert not np.allclose(altered, originals)
    with pytest.raises(ValueError, match=f"the region features of {source.image_attacks[1]!r} are missing"):
        cache.embeddings(model, altered_images(source, source.image_attacks[1]))


@pytest.mark.parametrize("damage, problem", [
    ("rows", "has 11 feature rows and 12 ids"),
    ("width", "holds float32 of shape (12, 36, 8), not (images, regions, 40) floats"),
    ("unknown id", "lacks 1 of the benchmark's images, for example 'images/011.png'"),
    ("repeated id", "names image 'images/000.png' more than once"),
])
def test_region_features_of_the_wrong_size_or_ids_are_refused_by_set(damage, problem, benchmark, region_folder,
                                                                     tmp_path):
    from rococo_eval.models.cache import EmbeddingCache
    from rococo_eval.scoring.galleries import original_images

    source = BenchmarkSource(benchmark)
    folder = tmp_path / "features"
    folder.mkdir()
    array, ids = np.load(region_folder / "original_ims.npy"), (region_folder / "original_ids.txt").read_text().split()
    if damage == "rows":
        array = array[:-1]
    elif damage == "width":
        array = array[:, :, :8]
    elif damage == "unknown id":
        ids[-1] = "images/999.png"
    else:
        ids[1] = ids[0]
    np.save(folder / "original_ims.npy", array)
    (folder / "original_ids.txt").write_text("\n".join(ids) + "\n")
    model = load_model(make_tiny_vse(tmp_path / "model", "region", region_features=folder), device="cpu")
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        EmbeddingCache(tmp_path / "cache").embeddings(model, original_images(source))


def test_a_region_model_without_its_features_folder_is_refused(states, tmp_path):
    opt = vse_options("region")
    name = save_vse_checkpoint(tmp_path / "model_best.pth", opt, *tiny_vse_states(opt))
    with pytest.raises(ModelError, match=r"a region model \(precomp_enc_type 'basic'\) reads precomputed BUTD region "
                                         r"features: name their folder as \"region_features\""):
        load_model(name, device="cpu")


def test_a_checkpoint_needing_a_type_outside_the_allowlist_is_refused_and_nothing_runs(states, tmp_path):
    """A pickle that would create a file when unpickled: refused, the type named, the file never made."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return eval, (f"open({str(marker)!r}, 'w').close()",)

    opt, image_state, text_state = states
    name = save_vse_checkpoint(tmp_path / "model_best.pth", opt, image_state, text_state, extra={"hook": Payload()})
    with pytest.raises(ModelError, match=r"needs eval to be read, which is not on the allowlist of types it "
                                         r"may hold \(argparse.Namespace, numpy.dtype, "):
        load_model(name, device="cpu")
    assert not marker.exists()


def test_a_checkpoint_written_with_numpy_1_loads(states, tmp_path):
    """The released checkpoints date from NumPy 1, whose scalars pickle as ``numpy.core.multiarray.scalar`` (NumPy 2:
    ``numpy._core``): the file is rewritten with NumPy 1's name, as such a checkpoint holds it."""
    import zipfile

    opt, image_state, text_state = states
    written = tmp_path / "numpy2.pth"
    save_vse_checkpoint(written, opt, image_state, text_state)
    path = tmp_path / "model_best.pth"
    with zipfile.ZipFile(written) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as target:
        for name in source.namelist():
            content = source.read(name)
            if name.endswith("data.pkl"):
                assert b"numpy._core.multiarray\nscalar" in content
                content = content.replace(b"numpy._core.multiarray\nscalar", b"numpy.core.multiarray\nscalar")
            target.writestr(name, content)
    path.with_suffix(".json").write_text(written.with_suffix(".json").read_text())
    assert load_model(f"vse:{path}", device="cpu").options.variant == "wsl_grid"


def test_the_fingerprint_follows_the_text_encoders_settings(states, tmp_path):
    """Another number of attention heads (a setting beside the checkpoint) embeds differently: another fingerprint,
    so the cache never serves the other's embeddings."""
    opt, image_state, text_state = states
    path = tmp_path / "model_best.pth"
    save_vse_checkpoint(path, opt, image_state, text_state)
    two = load_model(f"vse:{path}", device="cpu")
    save_vse_checkpoint(path, opt, image_state, text_state, settings={"text_num_attention_heads": 4})
    four = load_model(f"vse:{path}", device="cpu")
    assert two.fingerprint != four.fingerprint
    assert not np.allclose(two.encode_texts(["a dog on a mat"]), four.encode_texts(["a dog on a mat"]))
    save_vse_checkpoint(path, opt, image_state, text_state, settings={"text_num_attention_heads": "4"})
    with pytest.raises(ModelError, match="text_num_attention_heads = '4' is out of bounds: an int from 1 to"):
        load_model(f"vse:{path}", device="cpu")


def test_the_region_features_folder_is_relative_to_the_settings_file(benchmark, region_folder, tmp_path):
    import shutil

    shutil.copytree(region_folder, tmp_path / "model" / "features")
    name = make_tiny_vse(tmp_path / "model", "region", region_features="features")
    assert load_model(name, device="cpu").region_folder == str(tmp_path / "model" / "features")


def test_a_hook_that_gives_another_item_set_is_refused():
    from rococo_eval.models.cache import ItemSet, model_inputs

    class Confused:
        name = "confused"

        def item_inputs(self, items):
            return ItemSet("images/other", items.kind, items.items, items.fingerprint)

    items = ItemSet("images/original", "image", [1, 2], "f" * 64)
    with pytest.raises(ValueError, match=r"model 'confused': item_inputs\('images/original'\) gave 'images/other'"):
        model_inputs(Confused(), items)


@pytest.mark.slow
def test_the_region_variant_gives_the_report_of_one_process_on_two(benchmark, region_folder, tmp_path):
    """``torchrun --nproc-per-node 2``: both ranks read the region features, the report is one process's."""
    import os
    import subprocess
    import sys

    from helpers import REPO_ROOT

    name = make_tiny_vse(tmp_path / "model", "region", region_features=region_folder)
    arguments = ["run", "--model", name, "--benchmark", str(benchmark), "--batch-size", "4", "--quiet"]
    assert main(arguments + ["--cache-dir", str(tmp_path / "one-cache"), "--out", str(tmp_path / "one")]) == 0
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                           "rococo_eval", *arguments, "--cache-dir", str(tmp_path / "cache"), "--out",
                           str(tmp_path / "two")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "two" / "report.json").read_bytes() == (tmp_path / "one" / "report.json").read_bytes()


def test_module_prefixes_are_optional_and_numpy_scores_are_allowed(states, tmp_path):
    """The official training's ``module.`` keys and a plain state dict load alike; ``best_rsum`` is a NumPy scalar."""
    opt, image_state, text_state = states
    prefixed = load_model(save_vse_checkpoint(tmp_path / "a" / "model_best.pth", opt, image_state, text_state),
                          device="cpu")
    path = tmp_path / "b" / "model_best.pth"
    save_vse_checkpoint(path, opt, image_state, text_state)
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["model"] = [{key[len("module."):]: value for key, value in part.items()} for part in checkpoint["model"]]
    torch.save(checkpoint, path)
    plain = load_model(f"vse:{path}", device="cpu")
    assert plain.fingerprint == prefixed.fingerprint
    texts = ["A man riding a horse on the beach.", "two dogs"]
    np.testing.assert_array_equal(plain.encode_texts(texts), prefixed.encode_texts(texts))


@pytest.mark.parametrize("change, problem", [
    ({"backbone_source": "imagenet_resnext"}, "backbone_source 'imagenet_resnext' (an ImageNet backbone, from "
                                              "torch.hub) is not supported"),
    ({"backbone_source": "vgg"}, "unknown backbone_source 'vgg'"),
    ({"precomp_enc_type": "mlp"}, "precomp_enc_type 'mlp' is not one VSE infinity builds"),
])
def test_variants_that_cannot_be_scored_are_refused_by_name(states, tmp_path, change, problem):
    opt, image_state, text_state = states
    changed = argparse.Namespace(**{**vars(opt), **change})
    name = save_vse_checkpoint(tmp_path / "model_best.pth", changed, image_state, text_state)
    with pytest.raises(ModelError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_model(name, device="cpu")


def test_a_bigru_checkpoint_is_refused(states, tmp_path):
    opt, image_state, _ = states
    text_state = {"embed.weight": torch.zeros(10, 4), "rnn.weight_ih_l0": torch.zeros(12, 4)}
    name = save_vse_checkpoint(tmp_path / "model_best.pth", opt, image_state, text_state)
    with pytest.raises(ModelError, match="a checkpoint of the BiGRU branch, which this package does not score"):
        load_model(name, device="cpu")


def test_weights_are_loaded_strictly(states, tmp_path):
    """A missing and a left-over key are named (the official load_state_dict(strict=False) would drop them)."""
    opt, image_state, text_state = states
    missing = {key: value for key, value in image_state.items() if key != "image_encoder.fc.bias"}
    name = save_vse_checkpoint(tmp_path / "a" / "model_best.pth", opt, missing, text_state)
    with pytest.raises(ModelError, match=r"the image encoder's weights do not fill the image encoder of its options: "
                                         r"missing \['image_encoder.fc.bias'\], unexpected nothing"):
        load_model(name, device="cpu")
    extra = {**text_state, "linear.extra": torch.zeros(1)}
    name = save_vse_checkpoint(tmp_path / "b" / "model_best.pth", opt, image_state, extra)
    with pytest.raises(ModelError, match=r"missing nothing, unexpected \['linear.extra'\]"):
        load_model(name, device="cpu")


def test_position_ids_of_older_transformers_are_dropped_only_when_they_count_up(states, tmp_path):
    opt, image_state, text_state = states
    counting = {**text_state, "bert.embeddings.position_ids": torch.arange(64).unsqueeze(0)}
    assert load_model(save_vse_checkpoint(tmp_path / "a" / "model_best.pth", opt, image_state, counting),
                      device="cpu").options.variant == "wsl_grid"
    shuffled = {**text_state, "bert.embeddings.position_ids": torch.arange(64).flip(0).unsqueeze(0)}
    with pytest.raises(ModelError, match="its bert.embeddings.position_ids is not 0, 1, 2, ...: refused"):
        load_model(save_vse_checkpoint(tmp_path / "b" / "model_best.pth", opt, image_state, shuffled), device="cpu")


@pytest.mark.parametrize("content, problem", [
    ("not a torch file", "torch.load(weights_only=True) cannot read it"),
    ("a list", "is not a VSE infinity checkpoint: it saves {'model': [image encoder state, text encoder state], "
               "'opt': Namespace, ...}, this file holds a list"),
    ("no opt", "is not a VSE infinity checkpoint: its 'opt' is a NoneType"),
])
def test_files_that_are_no_vse_checkpoint_are_refused(states, tmp_path, content, problem):
    path = tmp_path / "model_best.pth"
    if content == "not a torch file":
        path.write_bytes(b"GIF89a not a checkpoint")
    elif content == "a list":
        torch.save([1, 2], path)
    else:
        torch.save({"model": [{}, {}]}, path)
    with pytest.raises(ModelError, match=f"`model` 'vse:{path}'.*" + problem.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace("{", r"\{").replace("}", r"\}")):
        load_model(f"vse:{path}", device="cpu")


def test_the_command_names_a_missing_checkpoint(benchmark, tmp_path, capsys):
    missing = tmp_path / "model_best.pth"
    assert main(["run", "--model", f"vse:{missing}", "--benchmark", str(benchmark), "--out", str(tmp_path / "report"),
                 "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 1
    assert f"rococo-eval: error: --model 'vse:{missing}': no such file" in capsys.readouterr().err


def test_images_the_official_loader_cannot_read_are_refused():
    assert imageio_pixels(Image.new("1", (3, 2))).shape == (2, 3)
    with pytest.raises(ValueError, match=r"an image of mode 'RGBA': VSE infinity's loader \(imageio, then "
                                         r"_process_image\) reads grayscale, RGB and CMYK images only"):
        imageio_pixels(Image.new("RGBA", (3, 2)))
    colours = Image.fromarray(np.arange(24, dtype=np.uint8).reshape(2, 4, 3)).convert("P")
    with pytest.raises(ValueError, match="of mode 'P'"):  # a palette of colours: four channels in imageio
        imageio_pixels(colours)


@pytest.mark.parametrize("generate, field", [
    (lambda folder, states: vse_with_options(folder, states, input_scale_factor=0),
     "opt.input_scale_factor = 0 is out of bounds: a number above 0"),
    (lambda folder, states: vse_with_options(folder, states, input_scale_factor=0.1),
     "opt.input_scale_factor = 0.1 resizes images to 25 pixels, under the 32"),
    (lambda folder, states: vse_with_options(folder, states, embed_size="1024"), "opt.embed_size = '1024' is out of"),
    (lambda folder, states: vse_with_settings(folder, states, {"tokenizer": 30522}),
     "'.*model_best.json': tokenizer must be a path or a Hub id, got 30522"),
    (lambda folder, states: vse_with_settings_text(folder, states, nested_json(100_000)),
     "its settings file '.*model_best.json': the model_best JSON nests 100001 deep, deeper than its 1"),
    (lambda folder, states: vse_with_text_weights(folder, states, **{"bert.encoder.layer.0.intermediate.dense.weight":
                                                                    torch.zeros(64)}),
     "its text encoder's bert.encoder.layer.0.intermediate.dense.weight is of shape \\(64,\\), not a matrix"),
])
def test_options_and_settings_out_of_bounds_are_refused_at_loading_by_field(states, tmp_path, generate, field):
    """Each was a traceback (OpenCV's assertion at the first image, TypeError, RecursionError, IndexError) or a model
    of images it cannot resize; now one line naming the checkpoint and the field, before anything is built."""
    name = generate(tmp_path, states)
    with pytest.raises(ModelError, match=f"^`model` '{re.escape(name)}'.*{field}") as refused:
        load_model(name, device="cpu")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("position_ids, problem", [
    (torch.zeros(1, dtype=torch.long).expand(200_000, 200_000),
     r"declares shape \(200000, 200000\) but its storage holds 8 bytes"),
    (7, "is a int, not a tensor"),
])
def test_position_ids_are_checked_as_tensors_before_they_are_compared(states, tmp_path, position_ids, problem):
    """Comparing them with 0, 1, 2, ... once made that range at the size they declared (320 GB), or an
    AttributeError."""
    name = vse_with_text_weights(tmp_path, states, **{"bert.embeddings.position_ids": position_ids})
    with pytest.raises(ModelError, match=f"bert.embeddings.position_ids {problem}"):
        load_model(name, device="cpu")
