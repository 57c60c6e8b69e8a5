"""RoCOCO (arXiv 2304.10727): COCO image-text retrieval with adversarial captions or images in the gallery."""

from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.task_metadata import TaskMetadata

_REFERENCE = "https://arxiv.org/abs/2304.10727"
_CITATION = r"""
@inproceedings{park2024rococo,
  archiveprefix = {arXiv},
  author = {Park, Seulki and Um, Daeho and Yoon, Hajung and Chun, Sanghyuk and Yun, Sangdoo},
  booktitle = {ECCV 2024 Workshop on Synthetic Data for Computer Vision},
  eprint = {2304.10727},
  title = {RoCOCO: Robustness Benchmark of MS-COCO to Stress-test Image-Text Matching Models},
  year = {2024},
}
"""
_I2T_GALLERY = (
    "COCO's 5,000 Karpathy test images retrieve their captions among the 25,010 test captions"
)
_T2I_GALLERY = (
    "COCO's 25,010 Karpathy test captions retrieve their image among the 5,000 test images"
)
_SCORING = (
    " Adversarial items are in the corpus without a relevance judgement, so they are never relevant; the main "
    "score is the hit rate at 1, RoCOCO's Recall@1 (the share of queries whose top item is correct)."
)
_I2T_PROMPT = {"query": "Find a caption that describes the following everyday image."}
_T2I_PROMPT = {"query": "Find the everyday image that the following caption describes."}
# the fields that RoCOCO's tasks share (dataset, name, description, category and prompt are each task's own)
_COMMON = dict(
    reference=_REFERENCE,
    type="Any2AnyRetrieval",
    modalities=["image", "text"],
    eval_splits=["test"],
    eval_langs=["eng-Latn"],
    main_score="hit_rate_at_1",
    date=("2014-05-01", "2023-04-21"),  # COCO's 2014 images to RoCOCO's paper
    domains=["Encyclopaedic"],
    task_subtypes=["Image Text Retrieval"],
    license="mit",  # RoCOCO's annotation files; the COCO images are CC BY 4.0
    annotations_creators="derived",  # the relevant items are COCO's image-caption pairs
    dialect=[],
    sample_creation="created",  # adversarial items made from COCO's by RoCOCO's attacks
    bibtex_citation=_CITATION,
)


class _RoCOCORetrieval(AbsTaskRetrieval):
    """A RoCOCO gallery: its adversarial items (ids ``decoy-...``) are in the corpus, never relevant."""

    def task_specific_scores(
        self,
        scores: dict[str, dict[str, float]],
        qrels: dict[str, dict[str, int]],
        results: dict[str, dict[str, float]],
        hf_split: str,
        hf_subset: str,
    ) -> dict[str, float]:
        """RoCOCO's false rate: the percentage of queries whose top item is adversarial (MTEB's order: score, then id,
        the larger first)."""
        tops = [max(items.items(), key=lambda item: (item[1], item[0]))[0] for items in results.values() if items]
        adversarial = sum(top.startswith("decoy-") for top in tops)
        return {"rococo_false_rate": 100.0 * adversarial / max(len(results), 1)}


class RoCOCOCleanI2TRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOCleanI2TRetrieval",
        description="RoCOCO image-to-text retrieval without attack, the reference of the attacked tasks: "
        + _I2T_GALLERY
        + " (five relevant per image, six for ten of them)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOCleanI2TRetrieval", "revision": "unpinned"},
        category="i2t",
        prompt=_I2T_PROMPT,
        **_COMMON,
    )


class RoCOCOSameConceptI2TRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOSameConceptI2TRetrieval",
        description="RoCOCO image-to-text retrieval under the same_concept attack: "
        + _I2T_GALLERY
        + " plus 25,000 adversarial captions, each a test caption with one word replaced by a word of the same "
        "concept (another animal, another vehicle)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOSameConceptI2TRetrieval", "revision": "unpinned"},
        category="i2t",
        prompt=_I2T_PROMPT,
        **_COMMON,
    )


class RoCOCODiffConceptI2TRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCODiffConceptI2TRetrieval",
        description="RoCOCO image-to-text retrieval under the diff_concept attack: "
        + _I2T_GALLERY
        + " plus 25,000 adversarial captions, each a test caption with one word replaced by a word of another "
        "concept."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCODiffConceptI2TRetrieval", "revision": "unpinned"},
        category="i2t",
        prompt=_I2T_PROMPT,
        **_COMMON,
    )


class RoCOCORandVocaI2TRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCORandVocaI2TRetrieval",
        description="RoCOCO image-to-text retrieval under the rand_voca attack: "
        + _I2T_GALLERY
        + " plus 25,000 adversarial captions, each a test caption with one word replaced by a random word of "
        "COCO's vocabulary."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCORandVocaI2TRetrieval", "revision": "unpinned"},
        category="i2t",
        prompt=_I2T_PROMPT,
        **_COMMON,
    )


class RoCOCODangerI2TRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCODangerI2TRetrieval",
        description="RoCOCO image-to-text retrieval under the danger attack: "
        + _I2T_GALLERY
        + " plus 25,000 adversarial captions, each a test caption with a word replaced by a dangerous one. Some "
        "adversarial captions are identical to a test caption (the replaced word was already there)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCODangerI2TRetrieval", "revision": "unpinned"},
        category="i2t",
        prompt=_I2T_PROMPT,
        **_COMMON,
    )


class RoCOCOCleanT2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOCleanT2IRetrieval",
        description="RoCOCO text-to-image retrieval without attack, the reference of the attacked tasks: "
        + _T2I_GALLERY
        + "."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOCleanT2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOMixSeed1T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOMixSeed1T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the mix attack with seed 1: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image blended with another test image"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOMixSeed1T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOMixSeed10T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOMixSeed10T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the mix attack with seed 10: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image blended with another test image"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOMixSeed10T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOMixSeed100T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOMixSeed100T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the mix attack with seed 100: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image blended with another test image"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOMixSeed100T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOPatchSeed1T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOPatchSeed1T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the patch attack with seed 1: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image with a patch of another test image pasted on it"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOPatchSeed1T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOPatchSeed10T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOPatchSeed10T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the patch attack with seed 10: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image with a patch of another test image pasted on it"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOPatchSeed10T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )


class RoCOCOPatchSeed100T2IRetrieval(_RoCOCORetrieval):
    metadata = TaskMetadata(
        name="RoCOCOPatchSeed100T2IRetrieval",
        description="RoCOCO text-to-image retrieval under the patch attack with seed 100: "
        + _T2I_GALLERY
        + " plus 5,000 adversarial images, each a test image with a patch of another test image pasted on it"
        " (the seed draws the partners; RoCOCO reports seeds 1, 10 and 100 and their mean)."
        + _SCORING,
        dataset={"path": "rococo-eval/RoCOCOPatchSeed100T2IRetrieval", "revision": "unpinned"},
        category="t2i",
        prompt=_T2I_PROMPT,
        **_COMMON,
    )
