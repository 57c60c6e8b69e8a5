"""RoCOCO in a training loop: a torchmetrics ``Metric`` that keeps the embeddings of the benchmark's item sets (not
score triples) and, at ``compute()``, scores every gallery as ``rococo-eval run`` does.

torchmetrics' retrieval metrics take one ``(preds, target, indexes)`` triple per query-item pair: 2.5e8 of them for
one RoCOCO gallery, and none of them can say that a gallery item is adversarial. :class:`RococoRecallMetric` keeps
what the galleries are made of instead, each item set's embeddings (RoCOCO: 5,000 test images, 25,010 ground-truth
captions, and 25,000 adversarial captions or 5,000 altered images per attack), with each row's index in its item
set. Its states are lists gathered with ``dist_reduce_fx="cat"``, so under DDP each process embeds its share of a
split; the indexes put the gathered rows back in order, and the items a ``DistributedSampler`` repeats to pad its
last batch are kept once. ``compute()`` turns the rows into what ``run`` scores
(:meth:`~rococo_eval.models.similarity.Similarity.rows`), scores each gallery with the RoCOCO Recall metric
(:func:`~rococo_eval.scoring.embeddingsfile.score_embeddings`, as ``rococo-eval score`` scores an embeddings file)
and returns the report that ``evaluate_model`` returns (:func:`~rococo_eval.results.build_report`) as ``report.json``
holds it, ``{"meta", "results", "summary"}`` (:meth:`~rococo_eval.results.Report.to_dict`): torchmetrics rebuilds
every dataclass that ``compute`` returns, and refuses a frozen one.
:meth:`RococoRecallMetric.flatten` makes its numbers a flat dict for Lightning's ``self.log_dict``;
``examples/lightning_validation.py`` logs them from a ``validation_step``.

The item sets are those of :mod:`rococo_eval.scoring.embeddingsfile`: ``images/original``,
``captions/ground_truth``, ``captions/<text attack>`` and ``images/<image attack>``. ``update`` also takes the
``(config, split)`` of the ``load_dataset`` split whose rows they are
(:func:`~rococo_eval.scoring.embeddingsfile.item_set_of_rows`), so that a batch's ``indexes`` are its rows in that
split.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.distributed import gather_all_tensors

from rococo_eval.catalog import select_attacks
from rococo_eval.data.configs import CAPTIONS_CONFIG, IMAGES_CONFIG
from rococo_eval.data.source import open_source
from rococo_eval.models.similarity import DEFAULT_SIMILARITY, dense_numbers, similarity_named
from rococo_eval.results import Report, build_report
from rococo_eval.scoring.embeddingsfile import CAPTIONS, IMAGES, expected_name, item_set_of_rows, score_embeddings
from rococo_eval.scoring.plan import ScoringOptions

# Two rows given for one index must agree to this fraction of their norm: a DistributedSampler's padding embeds an
# item twice, in two batches, which a model may round differently; two different items are much further apart.
DUPLICATE_TOLERANCE = 1e-2
_CLEAN_SPLITS = {IMAGES: (IMAGES_CONFIG, "test"), CAPTIONS: (CAPTIONS_CONFIG, "test")}


class RococoRecallMetric(Metric):
    """RoCOCO Recall of every gallery, from the embeddings a training loop makes of the benchmark's item sets.

    Args:
        source: the benchmark (a :class:`~rococo_eval.data.source.Source`); a path is a generated benchmark folder
            (``open_source(benchmark=path)``), and None RoCOCO's annotations (``open_source()``). No images are
            needed: the metric reads the galleries' layouts only.
        attacks: which attacks' item sets it takes, as ``evaluate_model`` reads them: ``"all"``, ``"text"``,
            ``"image"``, or attack names (a list, or one comma-separated string).
        similarity: how the rows are scored (:mod:`rococo_eval.models.similarity`): ``"cosine"`` (rows normalised),
            ``"dot"``, or ``"csd"`` (``update`` then takes a pair ``(means, log_sigmas)``).
        ties: the metric's tie policy, ``"pessimistic"`` (``run``'s) or ``"optimistic"``.
        bootstrap: resamples for 95% confidence intervals (0: none), as ``rococo-eval score --bootstrap``.
        kwargs: torchmetrics' own (``compute_on_cpu``, ``process_group``, ``sync_on_compute``, ...). The default
            ``dist_sync_fn`` also gathers from a process that holds no rows of an item set, which torchmetrics' own
            cannot (gloo aborts).

    Attributes:
        source: the benchmark.
        attacks: the attacks it takes, in the source's order.
        item_sets: ``{item set name: its number of rows}``, the clean ones first.

    Call :meth:`update` for every batch (calling the metric itself does the same: a batch has no RoCOCO Recall of
    its own), :meth:`compute` once every row of every item set was given (a validation limited to some batches, or
    Lightning's sanity check, gives some rows only: ``examples/lightning_validation.py`` does not compute during the
    check, and resets), then
    ``reset()``. Each gallery is scored at the cut-offs ``run`` uses (:func:`~rococo_eval.layout.recall_cutoffs`);
    a gallery whose attack's item set got no rows is left out, as from an embeddings file that holds some attacks.
    Under DDP every process computes the same result from the gathered rows.

    Example:
        >>> import shutil, tempfile
        >>> from pathlib import Path
        >>> from PIL import Image
        >>> from rococo_eval.data.benchmark import make_benchmark
        >>> root = Path(tempfile.mkdtemp())
        >>> for name, colour in [("a.png", "red"), ("b.png", "blue")]:
        ...     Image.new("RGB", (32, 32), colour).save(root / name)
        >>> _ = (root / "set.csv").write_text("image,caption\\na.png,a red square\\nb.png,a blue square\\n")
        >>> benchmark = make_benchmark(root / "set.csv", root / "bench", strategies=["mix"], seeds=[3])
        >>> metric = RococoRecallMetric(benchmark)
        >>> metric.item_sets
        {'images/original': 2, 'captions/ground_truth': 2, 'images/mix_seed3': 2}
        >>> red, blue = [1.0, 0.0], [0.0, 1.0]
        >>> metric.update(torch.tensor([blue, red]), torch.tensor([1, 0]), ("images", "test"))
        >>> metric.update(torch.tensor([red, blue]), torch.tensor([0, 1]), "captions/ground_truth")
        >>> metric.update(torch.tensor([[0.9, 0.1], [0.1, 0.9]]), [0, 1], ("mix_seed3", "adversarial"))
        >>> results = metric.compute()["results"]
        >>> results["clean/image_to_text"]["recall@1"], results["mix_seed3/text_to_image"]["recall@1"]
        (100.0, 100.0)
        >>> metric.flatten(metrics=["recall@1"])["rococo/mix_seed3/text_to_image/recall@1"]
        100.0
        >>> metric.update(torch.ones(2, 3), [0, 1], "captions/ground_truth")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `embeddings` for 'captions/ground_truth' has width 3, but this metric holds rows of width 2 ...
        >>> shutil.rmtree(root)
    """

    is_differentiable = False
    # torchmetrics' one direction of a metric: None, as for a metric with no single best direction (PearsonCorrCoef),
    # since these numbers go both ways; higher_is_better_for says which way each one goes
    higher_is_better = None
    full_state_update = False
    LOWER_IS_BETTER = ("false_rate", "attack_success_rate")  # each gallery's numbers that are better when lower

    @classmethod
    def higher_is_better_for(cls, key: str) -> Optional[bool]:
        """Whether the number ``key`` (a metric's name, ``"false_rate"``, or a key of :meth:`flatten`,
        ``"rococo/mix/text_to_image/false_rate"``) is better when higher: True for the recalls and their means, False
        for the false rate and the attack success rate (:attr:`LOWER_IS_BETTER`), None for the counts. For a
        checkpoint that follows one number (Lightning's ``ModelCheckpoint(monitor=key, mode="max" or "min")``) or
        torchmetrics' ``MetricTracker(maximize=...)``.

        Example:
            >>> [RococoRecallMetric.higher_is_better_for(key) for key in
            ...  ("rococo/mix/text_to_image/recall@1", "clean_r_mean", "attack_success_rate", "num_queries")]
            [True, True, False, None]
        """
        name = key.rsplit("/", 1)[-1]
        if name in cls.LOWER_IS_BETTER:
            return False
        if name.startswith(("recall@", "clean_recall@")) or name in ("r_mean", "clean_r_mean"):
            return True
        return None

    def __init__(self, source=None, *, attacks: Union[str, Sequence[str]] = "all",
                 similarity: str = DEFAULT_SIMILARITY, ties: str = "pessimistic", bootstrap: int = 0, **kwargs: Any):
        kwargs.setdefault("dist_sync_fn", _gather_rows)
        super().__init__(**kwargs)
        if source is None or isinstance(source, (str, os.PathLike)):
            source = open_source(benchmark=source)  # RoCOCO's annotations, or the benchmark in that folder
        self.source = source
        self.attacks = select_attacks(attacks, source.text_attacks, source.image_attacks)
        self.similarity = similarity_named(similarity, "RococoRecallMetric")
        self.options = ScoringOptions(ties=ties, bootstrap=bootstrap)
        self.item_sets = {IMAGES: source.num_images, CAPTIONS: len(source.ground_truth_captions())}
        for attack in self.attacks:
            rows = len(source.adversarial_captions(attack)) if attack in source.text_attacks else source.num_images
            self.item_sets[expected_name(source, attack)] = rows
        for name in self.item_sets:
            self.add_state(_state("embeddings", name), default=[], dist_reduce_fx="cat")
            self.add_state(_state("indexes", name), default=[], dist_reduce_fx="cat")

    def update(self, embeddings, indexes, item_set) -> None:
        """Add a batch of one item set's embeddings.

        Args:
            embeddings: ``(rows, dimension)`` floats (a tensor, or an array), one row per item, of one width for
                every item set; for ``csd``, a pair ``(means, log_sigmas)`` of that shape. Kept detached, as
                float32, on their device.
            indexes: ``(rows,)`` ints: each row's index in its item set, which is its row in the ``load_dataset``
                split. Under DDP the processes' rows are put in order by them; an index given twice must come with
                the same embedding (:data:`DUPLICATE_TOLERANCE`), and is kept once.
            item_set: an item set's name (:attr:`item_sets`), or the ``(config, split)`` pair of the split that
                holds its rows, as ``load_dataset`` takes it: ``("images", "test")``, ``("captions", "test")``,
                ``(attack, "adversarial")``; an attack's ``"original"`` split stands for the query split it repeats.

        Raises:
            ValueError: an item set that is not this metric's, embeddings that are not finite 2-D floats of the
                width given before, or indexes that are not one int per row within the item set (each names the
                argument, the item set and the value).
        """
        name = self._item_set(item_set)
        rows = self._rows(embeddings, name)
        positions = self._indexes(indexes, name, len(rows), rows.device)
        getattr(self, _state("embeddings", name)).append(rows)  # only once everything was checked
        getattr(self, _state("indexes", name)).append(positions)

    def forward(self, embeddings, indexes, item_set) -> None:
        """The same as :meth:`update`: a batch has no RoCOCO Recall of its own, as every gallery needs all its
        items."""
        self.update(embeddings, indexes, item_set)

    def compute(self) -> dict:
        """Score every gallery from the rows given since the last ``reset()`` (on every process), as ``run`` does.

        Returns:
            the report (:func:`~rococo_eval.results.build_report`) as ``report.json`` holds it
            (:meth:`~rococo_eval.results.Report.to_dict`: torchmetrics rebuilds every dataclass that ``compute``
            returns, and refuses a frozen one): ``{"meta": {versions, "similarity", "attacks", ["settings"]},
            "results": {gallery key: scalar metric outputs}, "summary": rows}``; ``results`` and ``summary`` are what
            ``evaluate_model`` (and ``run``'s ``report.json``) give for the same embeddings; ``attacks`` are those
            whose item set got rows.

        Raises:
            ValueError: no rows of a clean item set (every gallery needs them), a row of an item set missing, one
                index given with two different embeddings, or item sets of different widths.
        """
        for name, split in _CLEAN_SPLITS.items():
            if _joined(getattr(self, _state("indexes", name))) is None:
                raise ValueError(f"`update` got no rows of {name!r} (the split {split!r}): every gallery needs the "
                                 "test images and the ground-truth captions")
        vectors = {}
        for name in self.item_sets:
            rows = self._ordered(name)
            if rows is not None:
                vectors[name] = rows
        widths = {name: rows.shape[1] for name, rows in vectors.items()}
        if len(set(widths.values())) > 1:
            raise ValueError(f"the item sets have rows of different widths {widths}: embed every item set into one "
                             "space")
        attacks = tuple(attack for attack in self.attacks if expected_name(self.source, attack) in vectors)
        scored = {name: self._scored(rows, name) for name, rows in vectors.items()}
        results = score_embeddings(scored, self.source, attacks, self.similarity, ties=self.options.ties,
                                   bootstrap=self.options.bootstrap)
        meta = {"similarity": self.similarity.name, "attacks": list(attacks), **self.options.report_entries()}
        return build_report(results, meta, self.source).to_dict()

    def flatten(self, report: Optional[dict] = None, *, prefix: str = "rococo",
                metrics: Optional[Sequence[str]] = None) -> dict[str, float]:
        """The numbers of ``report`` (default: :meth:`compute`'s) as one flat dict, for Lightning's ``self.log_dict``.

        Each row of the summary (every gallery, then the mean over seeds of each image method) gives
        ``"<prefix>/<attack>/<direction>/<metric>": value`` for each of its scalar numbers: ``recall@K``,
        ``clean_recall@K``, ``r_mean``, ``false_rate``, ``attack_success_rate``, the counts. Pairs (intervals,
        ranges) and the seeds are left out. For example ``rococo/clean/image_to_text/recall@1`` and
        ``rococo/mix/text_to_image/recall@1`` (the mean over ``mix_seed*``).

        Args:
            report: what :meth:`compute` returned.
            prefix: the first part of every key.
            metrics: the metrics to keep (e.g. ``["recall@1", "false_rate"]``); default: all.
        """
        report = Report.from_json(self.compute() if report is None else report)
        flat = {}
        for row in report.summary:
            for name, value in row.values.items():
                if (metrics is None or name in metrics) and _is_number(value):
                    flat[f"{prefix}/{row.key}/{name}"] = float(value)
        return flat

    def _item_set(self, item_set) -> str:
        """The item set's name of ``update``'s ``item_set``, checked."""
        name = item_set if isinstance(item_set, str) else None
        if isinstance(item_set, (tuple, list)) and len(item_set) == 2 and all(isinstance(p, str) for p in item_set):
            try:
                name = item_set_of_rows(self.source, *item_set)
            except ValueError:
                name = None
        if name not in self.item_sets:
            raise ValueError(f"`item_set` must be one of this metric's item sets ({', '.join(self.item_sets)}) or "
                             f"the (config, split) of the load_dataset split that holds one: ({IMAGES_CONFIG!r}, "
                             f"'test'), ({CAPTIONS_CONFIG!r}, 'test') or (ATTACK, 'adversarial') with ATTACK one of "
                             f"{', '.join(self.attacks) or 'no attack'}; got {item_set!r}")
        return name

    def _rows(self, embeddings, name: str) -> torch.Tensor:
        """``update``'s ``embeddings`` as float32 rows (a ``csd`` pair side by side), checked."""
        parts = self.similarity.split(embeddings, f"`embeddings` for {name!r}")
        if len(parts) == 1:
            rows = _matrix(parts[0], "`embeddings`", name)
        else:
            matrices = [_matrix(part, f"`embeddings[{i}]`", name) for i, part in enumerate(parts)]
            if len({matrix.shape for matrix in matrices}) != 1:
                shapes = " and ".join(f"{part} of shape {tuple(matrix.shape)}"
                                      for part, matrix in zip(self.similarity.parts, matrices))
                raise ValueError(f"`embeddings` for {name!r}: {shapes}; they must have one shape")
            rows = torch.cat(matrices, dim=1)
        for other in self.item_sets:
            held = getattr(self, _state("embeddings", other))
            if held and held[0].shape[1] != rows.shape[1]:
                raise ValueError(f"`embeddings` for {name!r} has width {self._width(rows)}, but this metric holds "
                                 f"rows of width {self._width(held[0])} (of {other!r}): embed every item set into "
                                 "one space")
        return rows

    def _indexes(self, indexes, name: str, count: int, device) -> torch.Tensor:
        """``update``'s ``indexes`` as int64 on ``device``, checked against the item set and the rows (on the CPU:
        one int per row)."""
        values = dense_numbers(indexes, f"`indexes` for {name!r}")
        if isinstance(values, torch.Tensor):
            integral = not values.is_floating_point() and values.dtype != torch.bool
        else:
            integral = values.dtype.kind in "iu"
        if values.ndim != 1 or not (integral or values.shape == (0,)):
            raise ValueError(f"`indexes` for {name!r} must be a 1-D tensor of ints (each row's index in its item "
                             f"set), got {values.dtype} of shape {tuple(values.shape)}")
        if len(values) != count:
            raise ValueError(f"`indexes` for {name!r} has {len(values)} entries for {count} rows of `embeddings`: "
                             "give one per row")
        values = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values
        size = self.item_sets[name]
        if count and (int(values.min()) < 0 or int(values.max()) >= size):
            bad = int(values.min()) if int(values.min()) < 0 else int(values.max())
            raise ValueError(f"`indexes` for {name!r} holds {bad}, outside its {size} rows (0 to {size - 1})")
        return torch.from_numpy(values.astype(np.int64)).to(device)

    def _ordered(self, name: str) -> Optional[torch.Tensor]:
        """The rows of item set ``name`` in its order, each index once; None when it got no rows."""
        indexes = _joined(getattr(self, _state("indexes", name)))
        if indexes is None:
            return None
        rows = _joined(getattr(self, _state("embeddings", name)))
        order = torch.argsort(indexes, stable=True)
        indexes, rows = indexes[order], rows[order]
        first = torch.ones(len(indexes), dtype=torch.bool, device=indexes.device)
        first[1:] = indexes[1:] != indexes[:-1]
        if not first.all():  # indexes given twice: each row against the first of its index
            firsts = rows[first][torch.cumsum(first, 0) - 1]
            scale = torch.maximum(rows.norm(dim=1), firsts.norm(dim=1))
            differ = (rows - firsts).norm(dim=1) > DUPLICATE_TOLERANCE * scale
            if differ.any():
                index = int(indexes[differ][0])
                raise ValueError(f"{name!r}: row {index} was given twice with different embeddings: an index names "
                                 "one item (a DistributedSampler's padding repeats items, which embed alike)")
        indexes, rows = indexes[first], rows[first]
        size = self.item_sets[name]
        if len(indexes) != size:
            present = torch.zeros(size, dtype=torch.bool, device=indexes.device)
            present[indexes] = True
            missing = int(torch.nonzero(~present)[0])
            raise ValueError(f"{name!r} lacks row {missing} ({len(indexes)} of its {size} rows were given): give "
                             "`update` every row of its split, on one process or shared among several (a validation "
                             "limited to some batches leaves rows out)")
        return rows

    def _scored(self, rows: torch.Tensor, name: str):
        """The float32 NumPy rows that ``run`` scores for these embeddings (a cosine model's normalised)."""
        side = "image" if name.startswith("images/") else "text"
        width = self._width(rows)
        output = self.similarity.joined([rows[:, start:start + width] for start in range(0, rows.shape[1], width)])
        return self.similarity.rows(side, output, type(self).__name__, f"update({name!r})")

    def _width(self, rows: torch.Tensor) -> int:
        """The width of the embeddings whose rows these are (a ``csd`` row holds means and log sigmas)."""
        return self.similarity.embedding_width(rows.shape[1])


def _gather_rows(tensor: torch.Tensor, group=None) -> list[torch.Tensor]:
    """torchmetrics' ``gather_all_tensors``, also for a process that holds no rows of an item set.

    torchmetrics gives such a process a 1-D float placeholder, whose shape and dtype would not match the other
    processes' rows in the gather; here it takes theirs (every state of the metric is 2-D float32 rows or 1-D int64
    indexes), and comes back as an empty tensor of that shape.
    """
    world_size = torch.distributed.get_world_size(group)
    kind = torch.tensor([int(tensor.numel() > 0), tensor.ndim, int(tensor.is_floating_point()),
                         tensor.shape[-1] if tensor.ndim else 0], device=tensor.device)
    kinds = [torch.zeros_like(kind) for _ in range(world_size)]
    torch.distributed.all_gather(kinds, kind, group=group)
    held = [entry.tolist() for entry in kinds if entry[0]]
    if held and tensor.numel() == 0:
        _, ndim, floating, width = held[0]
        tensor = torch.zeros((0,) if ndim == 1 else (0, width), dtype=torch.float32 if floating else torch.int64,
                             device=tensor.device)
    return gather_all_tensors(tensor, group)


def _state(kind: str, name: str) -> str:
    """The attribute of the state ``kind`` (``embeddings`` or ``indexes``) of item set ``name``."""
    return f"{kind}__{name.replace('/', '__')}"


def _joined(state) -> Optional[torch.Tensor]:
    """A list state as one tensor (after a DDP sync it is one already); None when it holds nothing."""
    if isinstance(state, list):
        return dim_zero_cat(state) if state else None
    return state if state.numel() else None


def _matrix(value, argument: str, name: str) -> torch.Tensor:
    """``value`` as detached float32 ``(rows, dimension)``: refused, naming ``argument``, unless 2-D finite floats."""
    values = dense_numbers(value, f"{argument} for {name!r}")
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    if tensor.ndim != 2 or not tensor.is_floating_point():
        raise ValueError(f"{argument} for {name!r} must be a 2-D float tensor (rows, dimension), got {tensor.dtype} "
                         f"of shape {tuple(tensor.shape)}")
    tensor = tensor.detach().to(torch.float32)
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{argument} for {name!r} holds non-finite values (NaN or infinity)")
    return tensor


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
