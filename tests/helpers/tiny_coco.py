"""A RoCOCO-shaped source small enough for re-ranking models: a few generated images on disk with 5 or 6 captions
each, 5 adversarial captions per image in two text attacks, and RoCOCO's gallery layouts."""

import numpy as np
from PIL import Image

from helpers.tiny_models import WORDS
from rococo_eval.catalog import IMAGE_TO_TEXT, TEXT_TO_IMAGE
from rococo_eval.layout import gallery_layout

ATTACKS = ("rand_voca", "danger")


class TinyCocoSource:
    """A RoCOCO-shaped benchmark of ``num_images`` generated images: 5 captions each (6 for image 1), 5
    adversarial captions per image in each text attack, galleries laid out as RoCOCO's."""

    text_attacks, image_attacks = ATTACKS, ()

    def __init__(self, folder, num_images=12, seed=0):
        rng = np.random.default_rng(seed)
        self.images_dir = folder
        self.image_files = [f"val2014/COCO_val2014_{index:012d}.jpg" for index in range(num_images)]
        (folder / "val2014").mkdir(parents=True, exist_ok=True)
        for name in self.image_files:
            pixels = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
            Image.fromarray(pixels).resize((40, 30), Image.Resampling.BILINEAR).save(folder / name, quality=90)
        self.captions_per_image = [6 if index == 1 else 5 for index in range(num_images)]
        sentence = lambda: " ".join(rng.choice(WORDS, rng.integers(3, 9))).capitalize() + "."  # noqa: E731
        self.captions = [sentence() for _ in range(sum(self.captions_per_image))]
        self.adversarial = {attack: [sentence().lower().rstrip(".") for _ in range(5 * num_images)]
                            for attack in ATTACKS}

    @property
    def num_images(self):
        return len(self.image_files)

    def original_image(self, index):
        with Image.open(self.images_dir / self.image_files[index]) as image:
            return image.convert("RGB")

    def altered_image(self, index):
        """The stand-in altered copy of an image: the image upside down."""
        return self.original_image(index).transpose(Image.Transpose.FLIP_TOP_BOTTOM)

    def ground_truth_captions(self):
        return list(self.captions)

    def adversarial_captions(self, attack):
        return list(self.adversarial[attack])

    def gallery(self, attack, direction=None, order=None):
        direction = direction or (TEXT_TO_IMAGE if attack.startswith(("mix", "patch")) else IMAGE_TO_TEXT)
        return gallery_layout(attack, direction, self.captions_per_image, order or "official")
