"""GalleryFacts: what an image-text set says of its galleries, read once where a source is opened; NO_SOURCE, the facts
without annotations, whose answers hold without a source."""

import numpy as np
import pytest

from rococo_eval.catalog import ATTACKS, TEXT_ATTACKS
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.data.source import ROCOCO_CARD_DATASET, RococoSource, open_source
from rococo_eval.reporting import analysis
from rococo_eval.results import GalleryResult
from rococo_eval.space import logic
from rococo_recall import rococo_recall


def test_the_facts_of_rococo_and_of_a_generated_benchmark(annotations_dir, benchmark):
    rococo = GalleryFacts.of(RococoSource(annotations_dir))
    assert (rococo.num_images, rococo.adversarial_per_image, rococo.attacks, rococo.text_attacks) == (
        5000, 5, ATTACKS, TEXT_ATTACKS)
    assert rococo.is_rococo and rococo.served == "RoCOCO" and rococo.card_dataset == ROCOCO_CARD_DATASET
    assert rococo.has_annotations and not rococo.has_images  # no images_dir given
    source = open_source(benchmark=benchmark)
    facts = GalleryFacts.of(source)
    assert facts.captions_per_image == tuple(source.captions_per_image) and "mix_seed7" in facts.attacks
    assert facts.attacks == tuple(source.text_attacks) + tuple(source.image_attacks)
    assert facts.text_attacks == tuple(source.text_attacks) and "danger" in facts.text_attacks
    assert facts.adversarial_per_image == source.adversarial_per_image == 4  # the benchmark's, not RoCOCO's 5
    assert not facts.is_rococo and facts.served == source.card_dataset[1] == facts.card_dataset[1]
    assert facts.has_annotations and facts.has_images and facts.source is source
    fewer = GalleryFacts.of(source, [1, 1, 1])  # the caption counts replaced, the rest the source's
    assert (fewer.captions_per_image, fewer.attacks, fewer.source) == ((1, 1, 1), facts.attacks, source)


def test_without_annotations_every_answer_holds():
    assert GalleryFacts.of(None) is NO_SOURCE
    assert (NO_SOURCE.captions_per_image, NO_SOURCE.num_images, NO_SOURCE.attacks, NO_SOURCE.text_attacks) == (
        None, 0, ATTACKS, TEXT_ATTACKS)
    assert NO_SOURCE.is_rococo and NO_SOURCE.served == "RoCOCO" and NO_SOURCE.card_dataset is None
    assert not NO_SOURCE.has_annotations and not NO_SOURCE.has_images
    counts = GalleryFacts.of(None, [2, 1])  # caption counts given by hand: standard layouts, nothing to quote
    assert counts == GalleryFacts([2, 1]) and counts.num_images == 2 and not counts.has_annotations
    with pytest.raises(ValueError, match="the RoCOCO annotation files are not available here"):
        logic.explore(NO_SOURCE, 0)
    assert logic.embeddings_note("e.safetensors", NO_SOURCE).endswith("where the images are")


def test_facts_are_equal_only_when_every_answer_is(benchmark):
    """Equal facts answer alike: the facts of a source are not those of its caption counts given by hand (which have
    no captions to quote nor images to show)."""
    source = open_source(benchmark=benchmark)
    facts = GalleryFacts.of(source)
    assert facts == GalleryFacts.of(source) and hash(facts) == hash(GalleryFacts.of(source))
    by_hand = GalleryFacts(source.captions_per_image, facts.adversarial_per_image, facts.attacks)
    assert facts.has_annotations != by_hand.has_annotations and facts != by_hand


def test_the_analysis_quotes_the_captions_of_the_facts_it_is_given(benchmark):
    """One flipped query of a benchmark's danger gallery: its captions and words with the benchmark's facts, its
    indices alone with NO_SOURCE."""
    source = open_source(benchmark=benchmark)
    layout = source.gallery("danger", "image_to_text", "official")
    scores = np.zeros((layout.num_queries, layout.num_gallery), dtype=np.float32)
    for query, correct in enumerate(layout.references):
        scores[query, list(correct)] = 1.0
    scores[0, np.flatnonzero(layout.adversarial)[0]] = 2.0  # an adversarial caption wins image 0's query
    per_query = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    facts = GalleryFacts.of(source)
    [quoted] = analysis.flipped_queries(per_query, layout, "danger", facts)
    [plain] = analysis.flipped_queries(per_query, layout, "danger", NO_SOURCE)
    assert quoted["query"] == plain["query"] == 0 and quoted["winner_row"] == plain["winner_row"]
    assert quoted["winner_caption"] in source.adversarial_captions("danger") and quoted["replaced"]
    assert quoted["correct_caption"] in source.ground_truth_captions()
    assert plain["winner_caption"] is None and plain["correct_caption"] is None
    results = {"danger/image_to_text": GalleryResult({}, per_query, layout)}
    assert list(analysis.analyse(results, facts)["by_word"]) == ["danger"]
    assert analysis.analyse(results, NO_SOURCE)["by_word"] == {}
