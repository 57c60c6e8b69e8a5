"""rococo_eval.attacks.alterations: altered images made group by group (an image and its partners), byte-identical to
``RococoSource.altered_image_bytes``, each original read once per pass."""

import numpy as np
import pytest

from rococo_eval.attacks.alterations import AlteredImages, alteration_groups


def test_alteration_groups_close_over_partners():
    partners = [3, 0, 2, 1, 5, 4]
    groups = alteration_groups(partners)
    assert groups == [[0, 1, 3], [2], [4, 5]]
    assert all(partners[index] in group for group in groups for index in group)


@pytest.mark.parametrize("attack", ["mix_seed1", "patch_seed100"])
def test_a_groups_altered_images_are_the_sources_bytes_with_each_original_read_once(source, reads, attack):
    images = AlteredImages(source, attack)
    group = images._group_of[83]
    made = images.make_group(group)
    assert sorted(made) == group and len(reads) == len(group) and set(reads.values()) == {1}
    for index in group:
        assert made[index] == source.altered_image_bytes(index, attack)


def test_stopped_altered_images_are_made_group_by_group_when_read(source, reads):
    images = AlteredImages(source, "mix_seed10", workers=2)
    images.stop()  # as the embedding loop does when it ends early (Ctrl-C)
    group = images._group_of[4999]
    made = images.jpeg(4999)
    assert len(reads) == len(group) and set(reads.values()) == {1}  # its group only, not all 5,000
    assert made == source.altered_image_bytes(4999, "mix_seed10")


def test_images_read_again_are_made_once_per_group(source, reads):
    images = AlteredImages(source, "mix_seed10", workers=2)
    images.stop()  # the embedding pass has ended and freed its bytes; the ITM stage reads images again
    group = images._group_of[4999]
    again = {index: images.jpeg(index) for index in group}
    assert len(reads) == len(group) and set(reads.values()) == {1}  # not once per image read
    assert again[4999] == source.altered_image_bytes(4999, "mix_seed10")


@pytest.mark.slow
def test_altered_images_are_the_sources_bytes_with_each_original_read_once(source, reads):
    attack = "patch_seed10"
    images = AlteredImages(source, attack, workers=2)
    sample = [0, 83, 2500, 4999, images.alterations[0][0]]
    made = {index: images.jpeg(index) for index in sample}
    assert len(reads) == source.num_images and set(reads.values()) == {1}
    for index in sample:
        assert made[index] == source.altered_image_bytes(index, attack)
    assert np.array_equal(np.asarray(images[1]), np.asarray(source.altered_image(1, attack)))
