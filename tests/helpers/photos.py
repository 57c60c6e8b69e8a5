"""Photo-like test images for the image pipelines (preprocessing in the workers, the processor replica)."""

import numpy as np
from PIL import Image


def photos():
    """Images of the sizes and modes COCO has (landscape, portrait, grayscale) and some it has not."""
    rng = np.random.default_rng(3)

    def photo(width, height):
        coarse = rng.integers(0, 256, (height // 40 + 2, width // 40 + 2, 3), dtype=np.uint8)
        smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), np.int16)
        return Image.fromarray(np.clip(smooth + rng.integers(-9, 10, smooth.shape), 0, 255).astype(np.uint8))

    return [photo(640, 480), photo(480, 640), photo(333, 517).convert("L"), photo(300, 200).convert("RGBA"),
            photo(427, 640).convert("P"), photo(50, 41), photo(640, 427)]
