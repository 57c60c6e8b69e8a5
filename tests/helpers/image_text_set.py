"""The image-text set that generated benchmarks are made from in the tests: 12 images with 5 hand-written captions
each (``captions_of``); one caption is blank and one has no noun. ``conftest.py`` writes it in every input format
(fixture ``image_set``) and makes a benchmark of it (fixture ``benchmark``)."""

NOUNS = ["dog", "horse", "woman", "bicycle", "table", "boat", "tree", "car", "pizza", "child", "kite", "bench"]
PLACES = ["beach", "street", "kitchen", "field", "park", "river"]
NO_NOUN = "it is so very bright and shiny"  # no noun, no content verb: no candidate word
BLANK = "   "


def captions_of(i: int) -> list[str]:
    """The 5 captions of image ``i`` (0 to 11): image 3's second has no noun, image 4's third is blank."""
    captions = [f"A {NOUNS[i]} standing near the {PLACES[(i + k) % len(PLACES)]} with a {NOUNS[(i + k + 3) % 12]}."
                for k in range(5)]
    if i == 3:
        captions[1] = NO_NOUN
    if i == 4:
        captions[2] = BLANK
    return captions
