"""Hostile checkpoints and side files (issue 40, items 3 and 4) are refused in one line naming the file and the field,
within seconds and within memory: each probe runs in a child process limited to the address space of importing torch
plus 2 GiB (:mod:`helpers.memory_limit`), where building or reading what it declares would take 4 to 128 GB.

The probes are generated here (:mod:`helpers.hostile_checkpoints`): tiny checkpoints declaring huge architectures,
and side files that are 2 GiB holes."""

import shutil
import sys
import time

import pytest
import torch

from rococo_eval.models.checkpoints import MAX_LAYERS, MAX_PARAMETERS, CheckpointError, check_state
from helpers.hostile_checkpoints import (
    hf_with_config,
    hf_with_file_text,
    hf_with_sparse_file,
    nested_json,
    open_clip_with_config,
    open_clip_with_model_config,
    open_clip_with_sparse_config,
    pcmepp_with_config,
    pcmepp_with_sparse_config,
    region_features_with_sparse_ids,
    vse_with_options,
    vse_with_sparse_settings,
    vse_with_sparse_vocabulary,
    vse_with_text_weights,
)
from helpers.memory_limit import probe, run_probes, run_under_memory_limit
from helpers.sparse_files import sparse_file
from helpers.tiny_models import TINY_VSE, tiny_vse_states, torchvision_stand_in, vse_options
from rococo_eval.models.adapters import ModelError, load_model

REFUSAL_SECONDS = 10  # a refusal reads a tiny file and checks numbers; what it refuses took 75-114 s to build
LOAD = "rococo_eval.models.adapters:load_model"
IMAGE_FILES = ["val2014/COCO_val2014_000000391895.jpg", "val2014/COCO_val2014_000000057870.jpg"]
# probe: (generator(folder, states) -> model name, the hostile file in folder, what the refusal says of the field)
MEMORY_PROBES = {
    "vse: an extra text key naming BERT layer 1,000,000": (
        lambda folder, states: vse_with_text_weights(
            folder, states, **{"bert.encoder.layer.1000000.output.dense.bias": torch.zeros(TINY_VSE["bert_width"])}),
        "model_best.pth", f"BERT's layers (bert.encoder.layer.1000000.*) = 1000001 is out of bounds: an int from 1 "
                          f"to {MAX_LAYERS}"),
    "vse: a stride-0 word embedding declaring 30,522 x 131,072": (
        lambda folder, states: vse_with_text_weights(
            folder, states, **{"bert.embeddings.word_embeddings.weight": torch.zeros(1).expand(30522, 131072)}),
        "model_best.pth", "bert.embeddings.word_embeddings.weight declares shape (30522, 131072) but its storage "
                          "holds 4 bytes"),
    "vse: embed_size 10**9": (lambda folder, states: vse_with_options(folder, states, embed_size=10**9),
                              "model_best.pth", "opt.embed_size = 1000000000 is out of bounds"),
    "vse: input_scale_factor 10**6": (lambda folder, states: vse_with_options(folder, states, input_scale_factor=1e6),
                                      "model_best.pth", "opt.input_scale_factor = 1000000.0 is out of bounds"),
    "pcmepp: vision_cfg.layers 100,000": (lambda folder, _: pcmepp_with_config(folder, vision={"layers": 100_000}),
                                          "", "vision_cfg.layers = 100000 is out of bounds"),
    "pcmepp: vision_cfg.width 10**6": (lambda folder, _: pcmepp_with_config(folder, vision={"width": 10**6}),
                                       "", "vision_cfg.width = 1000000 is out of bounds"),
    "pcmepp: text_cfg.context_length 10**6": (
        lambda folder, _: pcmepp_with_config(folder, text={"context_length": 10**6}),
        "", "text_cfg.context_length = 1000000 is out of bounds"),
    "pcmepp: embed_dim 10**8": (lambda folder, _: pcmepp_with_config(folder, embed_dim=10**8),
                                "", "embed_dim = 100000000 is out of bounds"),
    "vse: a settings file of 2 GiB": (vse_with_sparse_settings, "model_best.json",
                                      "model_best.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "vse: a vocabulary of 2 GiB": (vse_with_sparse_vocabulary, "vocab.txt",
                                   "vocab.txt: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "pcmepp: a config.json of 2 GiB": (lambda folder, _: pcmepp_with_sparse_config(folder), "config.json",
                                       "config.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "hf: text_config.num_hidden_layers 100,000": (
        lambda folder, _: hf_with_config(folder, **{"text_config.num_hidden_layers": 100_000}),
        "tiny-clip/config.json", f"text_config.num_hidden_layers = 100000 is out of bounds: an int from 1 to "
                                 f"{MAX_LAYERS}"),
    "hf: vision_config.hidden_size 10**6": (
        lambda folder, _: hf_with_config(folder, **{"vision_config.hidden_size": 10**6}),
        "tiny-clip/config.json", "vision_config.hidden_size = 1000000 is out of bounds"),
    "hf: vision_config.patch_size 0": (
        lambda folder, _: hf_with_config(folder, **{"vision_config.patch_size": 0}),
        "tiny-clip/config.json", "vision_config.patch_size = 0 is out of bounds: an int from 1 to"),
    "hf: heads that do not split the width": (
        lambda folder, _: hf_with_config(folder, **{"text_config.num_attention_heads": 3}),
        "tiny-clip/config.json", "text_config's width 32 does not split into 3 attention heads"),
    "hf: a config.json nested 100,000 deep": (
        lambda folder, _: hf_with_file_text(folder, "config.json", nested_json(100_000)),
        "tiny-clip/config.json", "nests 100001 deep"),
    "hf: a config.json of 2 GiB": (lambda folder, _: hf_with_sparse_file(folder, "config.json"),
                                   "tiny-clip/config.json",
                                   "config.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "hf: a tokenizer.json of 2 GiB": (lambda folder, _: hf_with_sparse_file(folder, "tokenizer.json"),
                                      "tiny-clip/tokenizer.json",
                                      "tokenizer.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "open_clip: vision_cfg.layers 100,000": (
        lambda folder, _: open_clip_with_model_config(folder, vision={"layers": 100_000}), "open_clip_config.json",
        f"model_cfg.vision_cfg.layers = 100000 is out of bounds: an int from 1 to {MAX_LAYERS}"),
    "open_clip: text_cfg.width 10**6": (
        lambda folder, _: open_clip_with_model_config(folder, text={"width": 10**6}), "open_clip_config.json",
        "model_cfg.text_cfg.width = 1000000 is out of bounds"),
    "open_clip: vision_cfg.mlp_ratio 10**6": (
        lambda folder, _: open_clip_with_model_config(folder, vision={"mlp_ratio": 1e6}), "open_clip_config.json",
        "model_cfg.vision_cfg.mlp_ratio = 1000000.0 is out of bounds"),
    "open_clip: vision_cfg.patch_size 0": (
        lambda folder, _: open_clip_with_model_config(folder, vision={"patch_size": 0}), "open_clip_config.json",
        "model_cfg.vision_cfg.patch_size = 0 is out of bounds"),
    "open_clip: an open_clip_config.json nested 100,000 deep": (
        lambda folder, _: open_clip_with_config(folder, nested_json(100_000)), "open_clip_config.json",
        "nests 100001 deep"),
    "open_clip: an open_clip_config.json of 2 GiB": (
        lambda folder, _: open_clip_with_sparse_config(folder), "open_clip_config.json",
        "open_clip_config.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
}
REGION_IDS_PROBE = "vse: a region features' ids file of 2 GiB"
BLIP_VOCABULARY_PROBE = "blip: a vocabulary of 2 GiB"


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """The outcome of every probe, run in one child under the address-space limit, with the folder of each."""
    opt = vse_options("wsl")
    states = (opt, *tiny_vse_states(opt))
    probes, folders = [], {}
    for number, (probe_id, (generate, _, _)) in enumerate(MEMORY_PROBES.items()):
        folders[probe_id] = tmp_path_factory.mktemp(f"probe{number}")
        probes.append(probe(probe_id, LOAD, generate(folders[probe_id], states), device="cpu"))
    folders[REGION_IDS_PROBE] = tmp_path_factory.mktemp("regions")
    probes.append(probe(REGION_IDS_PROBE, "rococo_eval.models.region_features:read_region_features",
                        region_features_with_sparse_ids(folders[REGION_IDS_PROBE], IMAGE_FILES, 40), "original",
                        IMAGE_FILES, 40, "`model` 'vse:m'"))
    folders[BLIP_VOCABULARY_PROBE] = tmp_path_factory.mktemp("blip")
    probes.append(probe(BLIP_VOCABULARY_PROBE, "rococo_eval.models.blip_official:blip_tokenizer",
                        str(sparse_file(folders[BLIP_VOCABULARY_PROBE] / "vocab.txt"))))
    return run_probes(probes), folders


def _assert_refused(outcome, error: str, path: str, field: str) -> None:
    assert outcome is not None, "the child never reported this probe (killed, or stopped after another one)"
    assert (outcome["error"], outcome["seconds"] < REFUSAL_SECONDS) == (error, True), outcome
    assert "\n" not in outcome["message"] and path in outcome["message"] and field in outcome["message"], outcome


@pytest.mark.parametrize("probe_id", MEMORY_PROBES)
def test_a_hostile_checkpoint_is_refused_in_one_line_within_seconds_and_memory(refusals, probe_id):
    results, folders = refusals
    _, hostile_file, field = MEMORY_PROBES[probe_id]
    _assert_refused(results.get(probe_id), "ModelError", str(folders[probe_id] / hostile_file), field)


def test_a_region_features_ids_file_of_2_gib_is_refused_within_memory(refusals):
    results, folders = refusals
    _assert_refused(results.get(REGION_IDS_PROBE), "RegionFeatureError",
                    str(folders[REGION_IDS_PROBE] / "original_ids.txt"), "over the limit")


def test_a_blip_vocabulary_of_2_gib_is_refused_within_memory(refusals):
    results, _ = refusals
    _assert_refused(results.get(BLIP_VOCABULARY_PROBE), "ValueError", "vocab.txt",
                    "the file is 2147483648 bytes (2.0 GB), over the limit")


def test_the_limit_is_measured_over_a_real_baseline(refusals):
    """The child's baseline is that of importing torch (hundreds of MB of address space), so the limit is tight."""
    results, _ = refusals
    baselines = {outcome["baseline"] for outcome in results.values()}
    assert len(baselines) == 1 and 100 << 20 < baselines.pop() < 8 << 30


def test_tensors_sharing_one_storage_are_bounded_by_the_values_they_declare_together():
    """Dense views of one storage are each backed, but a model built for them allocates each: their total is bounded."""
    shared = torch.zeros(1024, 1024)
    state = {f"layer.{index}.weight": shared for index in range(MAX_PARAMETERS // (1 << 20) + 1)}
    with pytest.raises(CheckpointError, match=f"its tensors declare {len(state) << 20} values, over the bound of "
                                              f"{MAX_PARAMETERS}"):
        check_state(state, "m")


@pytest.mark.parametrize("vision, text, said", [
    ({"patch_size": 0}, {}, "model_cfg.vision_cfg.patch_size = 0 is out of bounds"),
    ({"head_width": 64}, {}, "model_cfg.vision_cfg.head_width = 64 is out of bounds: an int from 1 to 32"),
    ({}, {"heads": 3}, "model_cfg.text_cfg's width 32 does not split into 3 attention heads"),
], ids=["patch 0", "a head wider than the width", "heads that do not split the width"])
def test_an_open_clip_folder_is_refused_by_field_where_open_clip_divides_by_zero(tmp_path, vision, text, said):
    """Loaded with open_clip importable (the torchvision stand-in): once ZeroDivisionError or an AssertionError
    from torch, now one line naming the folder's config and the field."""
    name = open_clip_with_model_config(tmp_path / "model", vision=vision, text=text)
    with torchvision_stand_in(), pytest.raises(ModelError) as refused:
        load_model(name, device="cpu")
    assert str(refused.value).startswith(f"`model` {name!r}: its config ") and said in str(refused.value)


HUB_PROBES = {  # a model named by its Hub id: (generator(folder) -> local model name, its name by Hub id, the field)
    "hf: 100,000 text layers": (
        lambda folder: hf_with_config(folder, **{"text_config.num_hidden_layers": 100_000}), "hf:org/tiny",
        "config.json': text_config.num_hidden_layers = 100000 is out of bounds"),
    "hf: a config.json of 2 GiB": (lambda folder: hf_with_sparse_file(folder, "config.json"), "hf:org/tiny",
                                   "config.json': config.json: the file is 2147483648 bytes (2.0 GB), over the limit"),
    "open_clip: 100,000 vision layers": (
        lambda folder: open_clip_with_model_config(folder, vision={"layers": 100_000}), "open_clip:hf-hub:org/tiny",
        "open_clip_config.json': model_cfg.vision_cfg.layers = 100000 is out of bounds"),
}


@pytest.mark.parametrize("hostile", HUB_PROBES)
def test_a_hub_models_config_is_checked_before_it_is_read(tmp_path, monkeypatch, hostile):
    """``hf:ORG/NAME``, ``open_clip:hf-hub:ORG/NAME``: the config the Hub gives (here from its cache, offline) is
    checked as a local folder's is, in a child under a 3 GiB address space: once minutes of building layers, or the
    2 GiB file read whole, ending in MemoryError."""
    generate, name, said = HUB_PROBES[hostile]
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "0123abc"
    (tmp_path / "local").mkdir()
    local = generate(tmp_path / "local")
    shutil.copytree(local.split(":")[-1], snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    done = run_under_memory_limit([sys.executable, "-c", "from rococo_eval.models.adapters import load_model; "
                                   f"load_model({name!r}, device='cpu')"], limit_bytes=3 << 30, timeout_s=120)
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith(f"rococo_eval.models.adapters.ModelError: `model` {name!r}: its config "
                              f"'{snapshot}/") and said in refusal, done.stderr
    assert time.monotonic() - started < 60
