"""Images per second of VSE infinity's WSL grid encoder at 512 x 512 (the paper's variant, ``coco_wsl_grid_bert``),
against the BUTD detector grid encoder in the same run, and the time of a full RoCOCO run.

    python benchmarks/bench_vse_encoder.py [--device cpu|cuda] [--batch-size 16]
        [--images 32] [--repeat 2] [--captions 1024] [--threads N]

The encoders are :mod:`rococo_eval.models.vse_infty`'s, at the released checkpoints' sizes with random weights (no
weights can be downloaded here): WSL ResNeXt-101 32x8d (torchvision's layout, 88.8 million parameters) and the BUTD
ResNet-101 (Caffe's layout), each with its GPO aggregation to 1,024 dimensions, at ``input_scale_factor`` 2.0 (512 x
512 images, a 16 x 16 grid); the text encoder is BERT-base with GPO. Printed:

- the preprocessing of one COCO-sized JPEG (640 x 480): imageio's decoding and OpenCV's resize and normalisation, as
  the embedding loop's worker threads run it (per image, one thread);
- images per second of each grid encoder (the median of ``--repeat`` runs, the two encoders alternating, after a
  warm-up batch), and the ratio of the WSL grid's rate to the detector grid's;
- captions per second of the text encoder, on captions of RoCOCO's lengths;
- the time of a full run: 35,000 images (the 5,000 test images and 6 x 5,000 altered copies) and 125,010 captions
  (25,010 ground-truth and 4 x 25,000 adversarial), at these rates.
"""

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rococo_eval.models.nets.resnet import ResNet  # noqa: E402
from rococo_eval.models.resnet import ResnetShape  # noqa: E402
from rococo_eval.models.vse_infty import build_encoders, imageio_pixels, process_image, read_options  # noqa: E402

FULL_RUN_IMAGES = 5_000 + 6 * 5_000
FULL_RUN_CAPTIONS = 25_010 + 4 * 25_000
BACKBONES = {"wsl": ResnetShape("torchvision", (3, 4, 23, 3), 32, 8), "detector": ResnetShape("caffe", (3, 4, 23, 3))}
WORDS = "a man woman dog cat riding sitting on the in of with table street red blue two is and bus kite pizza".split()


def options(source: str):
    import argparse as arguments

    return read_options(arguments.Namespace(precomp_enc_type="backbone", backbone_source=source, img_dim=2048,
                                            embed_size=1024, input_scale_factor=2.0), "benchmark")


def encoders(device: str):
    """The WSL and detector grid encoders and the BERT-base text encoder, random, in eval mode on ``device``."""
    import transformers

    bert = transformers.BertModel(transformers.BertConfig())  # bert-base-uncased's sizes
    text_state = {f"bert.{key}": value for key, value in bert.state_dict().items()}
    made = {}
    for source, shape in BACKBONES.items():
        image_state = {f"backbone.resnet.{key}": value for key, value in ResNet(shape).state_dict().items()}
        image_encoder, text_encoder = build_encoders(options(source), image_state, text_state)
        made[source] = image_encoder.to(device).eval()
    made["text"] = text_encoder.to(device).eval()
    return made


def preprocessing_ms(repeat: int = 20) -> float:
    """Milliseconds to decode and preprocess one 640 x 480 JPEG for the WSL grid (median of ``repeat``)."""
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)).save(buffer, format="JPEG", quality=90)
    data, wsl = buffer.getvalue(), options("wsl")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        image = Image.open(io.BytesIO(data))
        image.load()
        process_image(imageio_pixels(image), wsl)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def image_rate(encoder, batch, device: str) -> float:
    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        encoder(batch)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return len(batch) / (time.perf_counter() - started)


def caption_rate(encoder, count: int, device: str) -> float:
    import torch

    rng = np.random.default_rng(1)
    lengths = rng.integers(10, 20, count)  # RoCOCO's captions: about 10 to 20 word pieces with [CLS] and [SEP]
    ids = torch.zeros(count, int(lengths.max()), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.from_numpy(rng.integers(1000, 30000, length))
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, count, 256):
            encoder(ids[start:start + 256].to(device), torch.Tensor(lengths[start:start + 256]).to(device))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return count / (time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--images", type=int, default=32, help="images per run and encoder")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--captions", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = encoders(args.device)
    print(f"torch {torch.__version__} on {args.device}, {torch.get_num_threads()} threads, fp32, 512 x 512 images")
    print(f"preprocessing (imageio decoding, OpenCV resize, normalisation) of a 640 x 480 JPEG: "
          f"{preprocessing_ms():.1f} ms, one thread")
    batch = torch.randn(args.batch_size, 3, 512, 512, device=args.device)
    for source in BACKBONES:  # warm-up
        image_rate(models[source], batch[:2], args.device)
    rates = {source: [] for source in BACKBONES}
    for _ in range(args.repeat):
        for source in BACKBONES:
            batches = [image_rate(models[source], batch, args.device)
                       for _ in range(max(1, args.images // args.batch_size))]
            rates[source].append(statistics.median(batches))
    wsl, detector = (statistics.median(rates[source]) for source in BACKBONES)
    captions = caption_rate(models["text"], args.captions, args.device)
    print(f"| encoder | images/s | ratio |\n|---|---|---|\n| WSL ResNeXt-101 32x8d grid (coco_wsl_grid_bert) | "
          f"{wsl:.2f} | {wsl / detector:.2f}x |\n| BUTD ResNet-101 grid (coco_butd_grid_bert) | {detector:.2f} | 1 |")
    print(f"BERT-base text encoder: {captions:.0f} captions/s")
    hours = (FULL_RUN_IMAGES / wsl + FULL_RUN_CAPTIONS / captions) / 3600
    print(f"a full run of coco_wsl_grid_bert ({FULL_RUN_IMAGES:,} images, {FULL_RUN_CAPTIONS:,} captions): "
          f"{hours:.1f} hours at these rates (images {FULL_RUN_IMAGES / wsl / 3600:.1f} h, captions "
          f"{FULL_RUN_CAPTIONS / captions / 3600:.2f} h)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
