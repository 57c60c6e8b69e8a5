"""The Space in tests: a tiny RoCOCO-like source held in memory, scores whose order the Space can read, and the app
served on a free loopback port."""

import socket
import time
from pathlib import Path

import httpx
import pytest

import numpy as np
from PIL import Image

from rococo_eval.data.facts import GalleryFacts
from rococo_eval.catalog import IMAGE_ATTACKS, TEXT_ATTACKS, attack_direction
from rococo_eval.data.source import ROCOCO_CARD_DATASET
from rococo_eval.layout import gallery_layout
from rococo_eval.space.example import write_example

CAPTIONS = [5] * 13 + [6] + [5] * 15 + [6]  # 30 images, 152 captions
DECIDING_CAPTIONS = [5] * 40 + [6] + [5] * 39  # 80 images: enough queries for the scores to show the order


class TinySource:
    """A RoCOCO-like source of 30 images: the caption "A dog ..." whose "dog" each text attack replaces. It stands
    for RoCOCO (its galleries go on the leaderboard)."""

    WORDS = {"same_concept": "cat", "diff_concept": "car", "rand_voca": "war", "danger": "weapon"}
    text_attacks, image_attacks = TEXT_ATTACKS, IMAGE_ATTACKS
    adversarial_per_image = 5
    is_rococo, card_dataset = True, ROCOCO_CARD_DATASET

    def __init__(self, captions_per_image, images=True):
        self.captions_per_image = list(captions_per_image)
        self.image_files = [f"val2014/COCO_val2014_{i:012d}.jpg" for i in range(len(captions_per_image))]
        self.images_dir = Path("tiny-coco") if images else None

    def ground_truth_captions(self):
        return [f"A dog number {i} in scene {j}." for i, n in enumerate(self.captions_per_image) for j in range(n)]

    def adversarial_captions(self, attack):
        return [f"a {self.WORDS[attack]} number {i} in scene {j}"
                for i in range(len(self.captions_per_image)) for j in range(self.adversarial_per_image)]

    def adversarial_sources(self, attack):
        offsets = np.cumsum([0] + self.captions_per_image)
        return [int(offsets[i]) + j for i in range(len(self.captions_per_image))
                for j in range(self.adversarial_per_image)]

    def original_image(self, index):
        return Image.new("RGB", (48, 32), (8 * index % 256, 90, 160))

    def altered_image(self, index, attack):
        return Image.new("RGB", (40, 40), (200, 8 * index % 256, 20 * IMAGE_ATTACKS.index(attack)))

    def alteration(self, index, attack):
        return (index + 1 + IMAGE_ATTACKS.index(attack)) % len(self.captions_per_image), None

    def gallery(self, attack, direction=None, order=None):
        return gallery_layout(attack, direction or attack_direction(attack), self.captions_per_image, order,
                              adversarial_per_image=self.adversarial_per_image)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_served(process, url: str, log, name: str, timeout_s: float = 180) -> None:
    """Wait until the app that ``process`` (a ``subprocess.Popen``, its output in the open file ``log``) starts
    answers at ``url``; fail the test with ``name`` and the log's end if it exits or takes over ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            process.kill()
            pytest.fail(f"{name} did not start on {url}:\n{log.read()[-3000:]}")
        time.sleep(0.5)


def serve(demo):
    """Launch the gradio app ``demo`` on a free loopback port without blocking; return its URL.

    Without gradio's own probe of the page (``_frontend=False``): it gives up after one 3 s request, which a machine
    busy with the suite's other workers can exceed; the tests' clients and browser load the page themselves.
    """
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True,
                            _frontend=False)
    return url


def clear_scores(attack, order, seed=0, captions=DECIDING_CAPTIONS):
    """An attacked image-to-text gallery scored by a model with clear signal: every correct caption +4, the
    image's own adversarial captions +3, over unit noise; its order shows in the scores."""
    layout = gallery_layout(attack, "image_to_text", captions, order)
    scores = np.random.default_rng(seed).standard_normal((layout.num_queries, layout.num_gallery))
    adversarial = np.flatnonzero(layout.adversarial)
    for query, references in enumerate(layout.references):
        scores[query, list(references)] += 4.0
        scores[query, adversarial[5 * query:5 * query + 5]] += 3.0
    return layout, scores.astype(np.float32)


def disk_use(folder: Path) -> int:
    """The bytes of every file under ``folder``."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def example_upload(source, folder: Path, seed: int) -> tuple[list[str], list[list[str]]]:
    """The synthetic model's score files of ``seed`` written into the new ``folder``, as the files and layout rows of
    an upload: another model's files of the same galleries, for each seed."""
    folder.mkdir()
    example = write_example(GalleryFacts.of(source), folder, seed=seed)
    return [str(path) for path in example.files], example.layouts
