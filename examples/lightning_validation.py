"""RoCOCO in a Lightning training loop: each validation embeds the benchmark's splits, and each epoch logs the
RoCOCO Recall of every gallery, scored as ``rococo-eval run`` scores them.

    python examples/lightning_validation.py --benchmark my-benchmark      # made by `rococo-eval attack`

``RococoRecallMetric`` keeps each split's embeddings with their row numbers, so the same module runs under DDP
(``Trainer(strategy="ddp", devices=N)``): each process embeds its share of a split, and ``compute()`` gathers the
rows back in order. It needs every row of every split: validate on all batches (no ``limit_val_batches``).

``TinyRetriever`` is a stand-in dual encoder (an image is its colours on a 4 x 4 grid, a caption its hashed words,
each projected), and for brevity the benchmark's own image-caption pairs stand in for a training set.
"""

import argparse
import hashlib
import json
import re

import datasets
import lightning
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from rococo_eval import RococoRecallMetric

BATCH_SIZE = 16


class TinyRetriever(lightning.LightningModule):
    def __init__(self, benchmark: str):
        super().__init__()
        self.image_projection = torch.nn.Linear(4 * 4 * 3, 64)
        self.word_projection = torch.nn.Linear(256, 64)
        self.rococo = RococoRecallMetric(benchmark)  # a path: a benchmark folder; None: RoCOCO itself
        self.splits = [("images", "test"), ("captions", "test")]
        self.splits += [(attack, "adversarial") for attack in self.rococo.attacks]

    def encode_images(self, images) -> torch.Tensor:
        grids = [np.asarray(image.convert("RGB").resize((4, 4)), dtype=np.float32).reshape(-1) / 255
                 for image in images]
        return self.image_projection(torch.from_numpy(np.stack(grids)).to(self.device) - 0.5)

    def encode_texts(self, texts) -> torch.Tensor:
        counts = torch.zeros(len(texts), 256, device=self.device)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                counts[row, hashlib.sha256(word.encode()).digest()[0]] += 1
        return self.word_projection(counts)

    def training_step(self, batch, batch_idx):
        images, texts = batch
        image_rows = F.normalize(self.encode_images(images), dim=-1)
        text_rows = F.normalize(self.encode_texts(texts), dim=-1)
        logits = image_rows @ text_rows.T / 0.07
        targets = torch.arange(len(texts), device=self.device)
        return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        indexes, items = batch  # rows of the split self.splits[dataloader_idx], and their row numbers
        embeddings = self.encode_texts(items) if isinstance(items[0], str) else self.encode_images(items)
        self.rococo.update(embeddings, indexes, self.splits[dataloader_idx])

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:  # the check before training embeds a few batches, not whole splits
            self.log_dict(self.rococo.flatten(metrics=["recall@1", "clean_recall@1", "false_rate"]))
        self.rococo.reset()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Rows(torch.utils.data.Dataset):
    """The rows of one ``load_dataset`` split, each with its row number."""

    def __init__(self, split: datasets.Dataset):
        self.split = split
        self.column = "image" if "image" in split.column_names else "caption"

    def __len__(self):
        return self.split.num_rows

    def __getitem__(self, index):
        return index, self.split[index][self.column]


class Pairs(torch.utils.data.Dataset):
    """Each caption of the ``captions`` split with its image."""

    def __init__(self, benchmark: str):
        self.captions = datasets.load_dataset(benchmark, "captions", split="test")
        self.images = datasets.load_dataset(benchmark, "images", split="test")

    def __len__(self):
        return self.captions.num_rows

    def __getitem__(self, index):
        caption = self.captions[index]
        return self.images[caption["image_index"]]["image"], caption["caption"]


def collate(rows):
    first, second = zip(*rows)
    return (torch.tensor(first) if isinstance(first[0], int) else list(first)), list(second)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", required=True, help="a benchmark folder made by `rococo-eval attack`")
    parser.add_argument("--train-batches", type=int, default=2)
    parser.add_argument("--save-weights", help="a file for the trained weights (torch.save of the state dict)")
    args = parser.parse_args(argv)
    lightning.seed_everything(0, verbose=False)
    model = TinyRetriever(args.benchmark)
    train = DataLoader(Pairs(args.benchmark), batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate)
    validation = [DataLoader(Rows(datasets.load_dataset(args.benchmark, config, split=split)), batch_size=BATCH_SIZE,
                             collate_fn=collate) for config, split in model.splits]
    trainer = lightning.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=args.train_batches,
                                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False)
    trainer.fit(model, train, validation)
    if args.save_weights:
        torch.save(model.state_dict(), args.save_weights)
    print(json.dumps({key: value.item() for key, value in trainer.callback_metrics.items()}, indent=1))


if __name__ == "__main__":
    main()
