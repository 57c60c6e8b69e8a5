"""rococo_eval.data.configs: the dataset's configs, their splits and tables, the features of each table, and the
splits an evaluation reads (checked against each other here, and against an export)."""

import pytest

from rococo_eval.catalog import ATTACKS, CLEAN, IMAGE_ATTACKS, IMAGE_TO_TEXT, TEXT_ATTACKS, TEXT_TO_IMAGE, galleries
from rococo_eval.data.configs import (CAPTION_EVIDENCE_FEATURES, CAPTION_FEATURES, CONFIGS, IMAGE_FEATURES,
                                      check_config, config_features, config_splits, dataset_splits, query_config,
                                      table_features, tables_of)
from rococo_eval.data.export import exported_configs


def test_dataset_splits_name_configs_of_the_export(export_folder):
    configs = exported_configs(export_folder)
    for attack, direction in (("rand_voca", None), ("patch_seed10", None), ("clean", "image_to_text")):
        splits = dataset_splits(attack, direction)
        for config, split in splits["queries"] + splits["gallery"]:
            assert split in configs[config]


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_reads_its_tables_with_one_schema(config):
    splits = config_splits(config)
    features = config_features(config)
    assert all(table_features(table) == features for table in splits.values())
    if config in TEXT_ATTACKS:
        assert splits == {"original": "captions_original", "adversarial": f"{config}_adversarial"}
        assert features == CAPTION_FEATURES and query_config(config) == "images"
    elif config in IMAGE_ATTACKS:
        assert splits == {"original": "images_original", "adversarial": f"{config}_adversarial"}
        assert features == IMAGE_FEATURES and query_config(config) == "captions"
    else:  # the query sets, each also a clean gallery of the other direction
        assert splits == {"test": f"{config}_original"}
        assert query_config(config) == {"captions": "images", "images": "captions"}[config]


@pytest.mark.parametrize("attack, direction", galleries(ATTACKS))
def test_the_splits_of_an_evaluation_are_splits_of_its_configs(attack, direction):
    splits = dataset_splits(attack, direction)
    (query_set, query_split), = splits["queries"]
    assert query_split in config_splits(query_set)
    for config, split in splits["gallery"]:
        assert split in config_splits(config) and query_config(config) == query_set
    tables = [config_splits(config)[split] for config, split in splits["gallery"]]
    if attack == CLEAN:
        assert tables == [{IMAGE_TO_TEXT: "captions_original", TEXT_TO_IMAGE: "images_original"}[direction]]
    else:
        assert tables[1] == f"{attack}_adversarial" and tables == tables_of([attack])


def test_a_generated_benchmarks_image_attack_with_another_seed_is_a_config():
    assert check_config("mix_seed7") == "mix_seed7"
    assert config_splits("patch_seed7") == {"original": "images_original", "adversarial": "patch_seed7_adversarial"}
    assert table_features("mix_seed7_adversarial") == IMAGE_FEATURES
    for name in ("mix_seed07", "mix-seed1", "randvoca", "clean"):
        with pytest.raises(ValueError, match=rf"^`config` must be one of \('same_concept', .*\), got '{name}'$"):
            check_config(name)


def test_tables_are_listed_once_originals_first():
    assert tables_of(CONFIGS) == ["captions_original", "images_original"] + [f"{a}_adversarial" for a in ATTACKS]
    assert tables_of(["mix_seed1", "rand_voca", "mix_seed1"]) == ["captions_original", "images_original",
                                                                  "mix_seed1_adversarial", "rand_voca_adversarial"]
    assert tables_of([]) == []


def test_a_benchmarks_caption_tables_add_the_evidence_of_each_word_choice():
    evidence = table_features("danger_adversarial", evidence=True)
    assert list(evidence) == list(CAPTION_FEATURES) + ["candidates"] and evidence == CAPTION_EVIDENCE_FEATURES
    assert table_features("captions_original", evidence=True) == CAPTION_EVIDENCE_FEATURES
    assert table_features("mix_seed1_adversarial", evidence=True) == IMAGE_FEATURES  # image tables have none


@pytest.mark.parametrize("table", ["captions", "images", "mixup_adversarial", "danger_original", ""])
def test_table_features_refuses_what_is_no_table(table):
    with pytest.raises(ValueError) as caught:
        table_features(table)
    assert str(caught.value) == ("`table` must be 'captions_original', 'images_original' or '<attack>_adversarial', "
                                 f"got {table!r}")
