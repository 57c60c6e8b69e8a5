"""rococo_eval.data.configs: the dataset's configs, their splits and tables, and the features of each table."""

from rococo_eval.data.configs import dataset_splits
from rococo_eval.data.export import exported_configs


def test_dataset_splits_name_configs_of_the_export(export_folder):
    configs = exported_configs(export_folder)
    for attack, direction in (("rand_voca", None), ("patch_seed10", None), ("clean", "image_to_text")):
        splits = dataset_splits(attack, direction)
        for config, split in splits["queries"] + splits["gallery"]:
            assert split in configs[config]
