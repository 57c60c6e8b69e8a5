"""rococo_eval.attacks.images: the official mix tables (partners and patch boxes) replayed from torch's streams, and
the altered pixels and JPEG bytes of mix and patch, bit for bit as the official mix_images.py makes them."""

import doctest
import io

import numpy as np
import pytest
from PIL import Image

from helpers import REPO_ROOT, load_script
from rococo_eval.attacks import images
from rococo_eval.attacks.images import (
    BATCH_SIZE,
    alter_image,
    alter_pixels,
    encode_jpeg,
    load_mix_table,
    make_mix_table,
    preprocess,
    to_uint8,
)
from rococo_eval.catalog import IMAGE_ATTACK_METHODS, SEEDS


def _load_tool():
    return load_script(REPO_ROOT / "tools" / "make_mix_tables.py")


def _batches(table):
    return [table.order[start : start + 64] for start in range(0, 5000, 64)]


def _random_pixels(rng):
    return rng.integers(0, 256, (384, 384, 3), dtype=np.uint8).astype(np.float32) / np.float32(255)


def _all_pairs():
    """uint8-valued pixels where (original, partner) runs through all 256 x 256 value pairs."""
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    original = np.zeros((384, 384, 3), dtype=np.uint8)
    partner = np.zeros((384, 384, 3), dtype=np.uint8)
    original[:256, :256] = a[..., None]
    partner[:256, :256] = b[..., None]
    return original, partner


def test_doctests():
    assert doctest.testmod(images).failed == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", IMAGE_ATTACK_METHODS)
def test_table_shapes_and_ranges(method, seed):
    table = load_mix_table(method, seed)
    assert (table.method, table.seed) == (method, seed)
    assert table.order.shape == table.partner.shape == (5000,)
    assert np.array_equal(np.sort(table.order), np.arange(5000))
    assert table.partner.min() >= 0 and table.partner.max() < 5000
    assert (table.box is None) == (method == "mix")
    if table.box is not None:
        assert table.box.shape == (5000, 4)
    assert not table.partner.flags.writeable


@pytest.mark.parametrize("seed", SEEDS)
def test_partners_permute_each_batch(seed):
    table = load_mix_table("mix", seed)
    batches = _batches(table)
    assert [len(b) for b in batches] == [64] * 78 + [8]
    for batch in batches:
        assert np.array_equal(np.sort(table.partner[batch]), np.sort(batch))


@pytest.mark.parametrize("seed", SEEDS)
def test_methods_share_the_torch_stream(seed):
    # the patch boxes come from NumPy's stream, so both methods draw the same partners
    mix, patch = load_mix_table("mix", seed), load_mix_table("patch", seed)
    assert np.array_equal(mix.order, patch.order)
    assert np.array_equal(mix.partner, patch.partner)


def test_about_one_self_partner_per_batch():
    counts = [int((load_mix_table("mix", s).partner == np.arange(5000)).sum()) for s in SEEDS]
    assert counts == [81, 72, 90]  # expected 79 per seed (one fixed point per random permutation)


@pytest.mark.parametrize("seed", SEEDS)
def test_patch_boxes(seed):
    table = load_mix_table("patch", seed)
    # lam 0.9: cut = int(384 * sqrt(0.1)) = 121, box [c - 60, c + 60) clipped to [0, 384]
    sides = {(max(c - 60, 0), min(c + 60, 384)) for c in range(384)}
    for batch in _batches(table):
        boxes = table.box[batch]
        assert (boxes == boxes[0]).all()
        row0, row1, col0, col1 = boxes[0].tolist()
        assert (row0, row1) in sides and (col0, col1) in sides
        for start, stop in ((row0, row1), (col0, col1)):
            assert 60 <= stop - start <= 120
            assert stop - start == 120 or start == 0 or stop == 384


def test_table_metadata():
    tables = images._tables()
    assert str(tables["torch_version"]).startswith("2.13")
    assert "mix_images.py" in str(tables["note"])
    assert float(tables["lam"]) == 0.9


@pytest.mark.parametrize(
    ("method", "seed", "match"),
    [
        ("blend", 1, "`method`.*'blend'"),
        ("mix", 2, "`seed`.*2"),
        ("patch", 1.0, "`seed`.*1.0"),
        ("mix", True, "`seed`.*True"),
        ("mix", "1", "`seed`.*'1'"),
    ],
)
def test_load_mix_table_errors(method, seed, match):
    with pytest.raises(ValueError, match=match):
        load_mix_table(method, seed)


def test_manual_replay_reproduces_tables():
    tool = _load_tool()
    regenerated = tool.build_tables()
    stored = images._tables()
    assert sorted(regenerated) == sorted(k for k in stored if "_seed" in k)
    for key, array in regenerated.items():
        assert np.array_equal(array, stored[key]), key


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("num_workers", [0, 4])
def test_dataloader_replay_reproduces_tables(num_workers):
    tool = _load_tool()
    seeds = SEEDS if num_workers == 4 else (1,)
    regenerated = tool.build_tables(lambda s, m: tool.replay_with_dataloader(s, m, num_workers))
    stored = images._tables()
    for key, array in regenerated.items():
        if any(f"_seed{s}_" in key for s in seeds):
            assert np.array_equal(array, stored[key]), key


def test_dataloader_replay_keeps_global_rng_state():
    import torch
    tool = _load_tool()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tool.replay_with_dataloader(1, "patch", num_workers=0)
    assert torch.equal(torch.rand(3), expected)
    np.random.seed(123)
    expected = np.random.rand(3)
    np.random.seed(123)
    tool.replay_with_dataloader(1, "patch", num_workers=0)
    assert np.array_equal(np.random.rand(3), expected)


def test_preprocess_matches_pil_bicubic():
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (300, 500), dtype=np.uint8))
    pixels = preprocess(image)
    expected = np.asarray(image.convert("RGB").resize((384, 384), Image.Resampling.BICUBIC))
    assert pixels.shape == (384, 384, 3) and pixels.dtype == np.float32
    assert np.array_equal(to_uint8(pixels), expected)  # ToTensor then save_image round-trips uint8


def test_mix_weights():
    original, partner = _all_pairs()
    mixed = np.asarray(alter_image(original.astype(np.float32) / 255, partner.astype(np.float32) / 255, "mix"))
    expected = np.round(0.9 * original.astype(float) + 0.1 * partner.astype(float))
    assert np.abs(mixed.astype(int) - expected).max() <= 1


def test_self_partner_is_resized_original():
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (200, 300, 3), dtype=np.uint8))
    resized = np.asarray(image.resize((384, 384), Image.Resampling.BICUBIC))
    assert np.array_equal(np.asarray(alter_image(image, image, "patch", box=(0, 120, 0, 120))), resized)
    assert np.abs(np.asarray(alter_image(image, image, "mix")).astype(int) - resized).max() <= 1


def test_patch_copies_only_the_box():
    rng = np.random.default_rng(2)
    x, x_partner = _random_pixels(rng), _random_pixels(rng)
    patched = alter_pixels(x, x_partner, "patch", box=(324, 384, 10, 130))
    inside = np.zeros((384, 384), dtype=bool)
    inside[324:384, 10:130] = True
    assert np.array_equal(patched[inside], x_partner[inside])
    assert np.array_equal(patched[~inside], x[~inside])


def test_mix_and_save_match_torch_bit_for_bit():
    import torch
    original, partner = _all_pairs()
    rng = np.random.default_rng(3)
    original[256:] = rng.integers(0, 256, original[256:].shape)
    partner[256:] = rng.integers(0, 256, partner[256:].shape)
    x, x_partner = (torch.from_numpy(a).permute(2, 0, 1).float().div(255) for a in (original, partner))
    assert np.array_equal(preprocess(Image.fromarray(original)), x.permute(1, 2, 0).numpy())
    for lam in (0.9, 0.7, 0.5):
        mixed = (lam * x + (1 - lam) * x_partner).permute(1, 2, 0)
        ours = alter_pixels(x.permute(1, 2, 0).numpy(), x_partner.permute(1, 2, 0).numpy(), "mix", lam=lam)
        assert np.array_equal(ours, mixed.numpy())
        assert np.array_equal(to_uint8(ours), mixed.mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8).numpy())


@pytest.mark.parametrize("lam", [0.9, 0.7, 0.5, 0.0, 1.0, np.float16(0.1), np.float32(0.3), np.array(0.9), 1])
def test_uint8_pixels_alter_as_their_float32_copies_on_every_value_pair(lam):
    """alter_image takes a shortcut for uint8 pixels (and PIL images, resized to them): every pair of values, and
    a patch on random pixels, gives the image that the float32 arithmetic saves."""
    original, partner = _all_pairs()
    rng = np.random.default_rng(4)
    original[256:] = rng.integers(0, 256, original[256:].shape)
    partner[256:] = rng.integers(0, 256, partner[256:].shape)
    floats = [value.astype(np.float32) / np.float32(255) for value in (original, partner)]
    for method, box in (("mix", None), ("patch", (100, 300, 7, 380)), ("patch", (0, 384, 0, 384))):
        if method == "patch" and lam != 0.9:
            continue
        shortcut = alter_image(original, partner, method, box=box, lam=lam)
        expected = to_uint8(alter_pixels(*floats, method, box=box, lam=lam))
        assert shortcut.mode == "RGB" and np.array_equal(np.asarray(shortcut), expected), (method, box)
    images = [Image.fromarray(value[::3, ::2]) for value in (original, partner)]
    assert np.array_equal(np.asarray(alter_image(*images, "mix", lam=lam)),
                          to_uint8(alter_pixels(*map(preprocess, images), "mix", lam=lam)))


@pytest.mark.parametrize("seed", SEEDS)
def test_patch_follows_official_nchw_indexing(seed):
    import torch
    table = load_mix_table("patch", seed)
    batch = table.order[-8:]  # the last batch, 8 images
    rng = np.random.default_rng(seed)
    pixels = {int(k): _random_pixels(rng) for k in batch}
    inputs = torch.from_numpy(np.stack([pixels[int(k)] for k in batch])).permute(0, 3, 1, 2).contiguous()
    position_of = {int(k): i for i, k in enumerate(batch)}
    rand_index = torch.tensor([position_of[int(table.partner[k])] for k in batch])
    bbx1, bbx2, bby1, bby2 = table.box[batch[0]].tolist()
    inputs[:, :, bbx1:bbx2, bby1:bby2] = inputs[rand_index, :, bbx1:bbx2, bby1:bby2]
    for position, k in enumerate(batch.tolist()):
        ours = alter_pixels(pixels[k], pixels[int(table.partner[k])], "patch", box=table.box[k])
        assert np.array_equal(ours, inputs[position].permute(1, 2, 0).numpy())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "cutmix"}, "`method`"),
        ({"method": "patch"}, "`box`"),
        ({"method": "patch", "box": (0, 10, 0)}, "`box`"),
        ({"method": "patch", "box": (-1, 10, 0, 10)}, "`box`"),
        ({"method": "patch", "box": (10, 0, 0, 10)}, "`box`"),
        ({"method": "patch", "box": (0, 10, 0, 385)}, "`box`"),
        ({"method": "mix", "box": (0, 10, 0, 10)}, "`box`"),
        ({"method": "mix", "lam": 1.5}, "`lam`"),
        ({"method": "mix", "original": np.zeros((384, 384, 3))}, "`original`.*float32"),
        ({"method": "mix", "partner": np.zeros((384, 384), dtype=np.float32)}, "`partner`.*shape"),
    ],
)
def test_alter_pixels_errors(kwargs, match):
    args = {"original": np.zeros((384, 384, 3), dtype=np.float32), "partner": np.ones((384, 384, 3), np.float32)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        alter_pixels(**args)


@pytest.mark.parametrize("original, partner, kwargs, match", [
    (np.zeros((384, 384, 3), np.uint8), np.zeros((10, 10, 3), np.uint8), {"method": "patch", "box": (0, 999, 0, 1)},
     "`partner`.*shape"),
    (np.zeros((384, 384, 3), np.uint8), [[0]], {"method": "mix", "box": (0, 1, 0, 1)}, "`partner` has to be"),
    (np.zeros((384, 384, 3), np.uint8), np.zeros((384, 384, 3), np.uint8), {"method": "mix", "box": (0, 1, 0, 1)},
     "`box` is only used"),
    (np.zeros((384, 384, 3), np.uint8), np.zeros((384, 384, 3), np.uint8), {"method": "blend"}, "`method`"),
    (np.zeros((384, 384, 3), np.uint8), np.zeros((384, 384, 3), np.uint8), {"method": "mix", "lam": 2}, "`lam`"),
])
def test_alter_image_names_the_first_wrong_argument_as_alter_pixels_does(original, partner, kwargs, match):
    for alter in (alter_pixels, alter_image):
        with pytest.raises(ValueError, match=match):
            alter(original, partner, **kwargs)


def test_jpeg_is_deterministic_and_default_quality():
    rng = np.random.default_rng(4)
    altered = alter_image(_random_pixels(rng), _random_pixels(rng), "mix")
    data = encode_jpeg(altered)
    assert data == encode_jpeg(altered)
    reference = io.BytesIO()
    altered.save(reference, format="JPEG", quality=75)
    assert data == reference.getvalue()
    decoded = Image.open(io.BytesIO(data))
    assert (decoded.format, decoded.size, decoded.mode) == ("JPEG", (384, 384), "RGB")


def test_mix_tables_follow_the_official_structure():
    table = make_mix_table("patch", 100, 5000)
    official = load_mix_table("patch", 100)
    # the boxes are the official NumPy draws, batch by batch
    assert np.array_equal(table.box[table.order[::BATCH_SIZE]], official.box[official.order[::BATCH_SIZE]])
    for start in range(0, 5000, BATCH_SIZE):  # partners are drawn within batches of 64
        batch = table.order[start:start + BATCH_SIZE]
        assert sorted(table.partner[batch]) == sorted(batch)
    assert np.array_equal(make_mix_table("mix", 100, 5000).partner, table.partner)
