"""The failure analysis: flipped queries, attack success by word and by method, the per-query export.

Small galleries whose answers are worked out by hand below, then RoCOCO-size galleries (the real annotation
files, integer-valued random embeddings so that every score is exact and ties are common) against a slow
reference of plain loops over the score rows.
"""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from helpers import REPO_ROOT
from rococo_eval.reporting import analysis
from rococo_eval.attacks.replacements import find_replacements
from rococo_eval.reporting.report import write_report
from rococo_eval.layout import caption_offsets, gallery_layout
from rococo_eval.data.facts import NO_SOURCE, GalleryFacts
from rococo_eval.data.source import ROCOCO_CARD_DATASET, RococoSource
from rococo_eval.results import PER_QUERY_KEYS, GalleryResult, build_report
from rococo_recall import rococo_recall


class HandSource:
    """Four images with 2, 2, 3 and 2 captions; two rand_voca-like adversarial captions each."""

    captions_per_image = [2, 2, 3, 2]
    adversarial_per_image = 2
    text_attacks, image_attacks = ("rand_voca",), ("mix_seed1",)
    card_dataset = ROCOCO_CARD_DATASET
    GROUND_TRUTH = ["a man on a bike", "a dog on a table",                        # image 0: rows 0, 1
                    "a man with a kite", "a boy with a kite",                     # image 1: rows 2, 3
                    "a woman at a table", "a cat on a sofa", "a cat on a couch",  # image 2: rows 4, 5, 6
                    "a man on a horse", "a horse in a field"]                     # image 3: rows 7, 8
    ADVERSARIAL = ["a war on a bike", "a dog on a season",       # image 0: man -> war, table -> season (rows 9, 10)
                   "a war with a kite", "a boy with a tree",     # image 1: man -> war, kite -> tree (rows 11, 12)
                   "a woman at a war", "a rain on a sofa",       # image 2: table -> war, cat -> rain (rows 13, 14)
                   "a war on a horse", "a horse in a kitchen"]   # image 3: man -> war, field -> kitchen (15, 16)

    def ground_truth_captions(self):
        return list(self.GROUND_TRUTH)

    SOURCES = [0, 1, 2, 3, 4, 5, 7, 8]  # adversarial caption j of an image came from its ground-truth caption j

    def adversarial_captions(self, attack):
        return list(self.ADVERSARIAL)

    def adversarial_sources(self, attack):
        return list(self.SOURCES)

    def alteration(self, index, attack):
        return (index + 1) % 2, None


def hand_text_gallery():
    """rand_voca, official order: columns image 0 GT 0-1, adv 2-3; image 1 GT 4-5, adv 6-7; image 2 GT 8-10,
    adv 11-12; image 3 GT 13-14, adv 15-16."""
    layout = gallery_layout("rand_voca", "image_to_text", HandSource.captions_per_image, "official",
                            adversarial_per_image=2)
    scores = np.zeros((4, 17))
    scores[0, [0, 1, 2, 4]] = [0.5, 0.3, 0.7, 0.2]    # clean-correct; its own "a war on a bike" wins by 0.2
    scores[1, [4, 5, 6, 11]] = [0.6, 0.4, 0.5, 0.9]   # clean-correct; image 2's "a woman at a war" wins by 0.3
    scores[2, [8, 9, 10, 11, 12]] = [0.2, 0.8, 0.3, 0.4, 0.7]  # clean-correct, not flipped
    scores[3, [0, 13, 15]] = [0.9, 0.5, 0.95]         # wrong on the clean gallery already: not counted
    return layout, scores


def test_flipped_queries_by_hand():
    layout, scores = hand_text_gallery()
    per_query = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    rows = analysis.flipped_queries(per_query, layout, "rand_voca", GalleryFacts.of(HandSource()))
    assert [row["query"] for row in rows] == [1, 0]  # largest margin first
    first, second = rows
    assert first["margin"] == pytest.approx(0.3) and first["winner_score"] == 0.9 and first["correct_score"] == 0.6
    assert (first["winner_column"], first["winner_row"], first["correct_column"], first["correct_row"]) == (11, 13, 4, 2)
    assert first["winner_caption"] == "a woman at a war" and first["winner_source_caption"] == "a woman at a table"
    assert (first["replaced"], first["replacement"], first["winner_image"], first["own_image"]) == \
        ("table", "war", 2, False)
    assert first["correct_caption"] == "a man with a kite" and first["image"] == 1
    assert second["margin"] == pytest.approx(0.2) and second["winner_row"] == 9 and second["own_image"]
    assert (second["correct_caption"], second["winner_caption"], second["replaced"]) == \
        ("a man on a bike", "a war on a bike", "man")
    assert set(rows[0]) == set(analysis.FLIPPED_COLUMNS)
    assert 100.0 * len(rows) / 3 == pytest.approx(per_query["attack_success_rate"])  # 2 of the 3 clean-correct


def test_word_vulnerability_by_hand():
    layout, scores = hand_text_gallery()
    per_query = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    table = analysis.word_vulnerability(per_query, layout, "rand_voca", GalleryFacts.of(HandSource()))
    # clean-correct images 0 {man, table}, 1 {man, kite}, 2 {table, cat}; image 0 flipped by its own "man"
    # caption, image 1 by image 2's caption (no word), image 2 not flipped
    assert [(r["word"], r["images"], r["successes"], r["success_rate"]) for r in table["replaced"]] == [
        ("man", 2, 1, 50.0), ("cat", 1, 0, 0.0), ("kite", 1, 0, 0.0), ("table", 2, 0, 0.0)]
    assert [(r["word"], r["images"], r["successes"]) for r in table["replacement"]] == [
        ("war", 3, 1), ("rain", 1, 0), ("season", 1, 0), ("tree", 1, 0)]
    assert table["replacement"][0]["success_rate"] == pytest.approx(100 / 3)
    assert (table["clean_correct"], table["flipped"], table["other_image_wins"]) == (3, 2, 1)
    assert analysis.most_damaging(table["replaced"], min_count=2) == [table["replaced"][0], table["replaced"][3]]
    with pytest.raises(ValueError, match="`min_count` must be a positive int, got 0"):
        analysis.most_damaging(table["replaced"], min_count=0)
    clean = gallery_layout("clean", "image_to_text", HandSource.captions_per_image)
    with pytest.raises(ValueError, match=r"`layout` must be a text attack's image-to-text gallery, got a "
                                         r"image_to_text gallery with 0 adversarial items \('clean'\)"):
        analysis.word_vulnerability(per_query, clean, "clean", GalleryFacts.of(HandSource()))
    with pytest.raises(ValueError, match=r"`facts` must be a set's, with its captions: .* got facts without "
                                         r"annotations \(NO_SOURCE\)"):
        analysis.word_vulnerability(per_query, layout, "rand_voca", NO_SOURCE)


class SkippingSource(HandSource):
    """HandSource as a generated benchmark records it when image 2's caption 1 had no candidate word: its second
    adversarial caption was made from its caption 2 ("a cat on a couch": cat -> rain)."""

    ADVERSARIAL = HandSource.ADVERSARIAL[:5] + ["a rain on a couch"] + HandSource.ADVERSARIAL[6:]
    SOURCES = [0, 1, 2, 3, 4, 6, 7, 8]


def test_words_come_from_the_caption_the_source_records():
    layout, scores = hand_text_gallery()
    scores[2, 12] = 0.9  # image 2's second adversarial caption now wins over its best ground truth (0.8)
    per_query = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    rows = analysis.flipped_queries(per_query, layout, "rand_voca", GalleryFacts.of(SkippingSource()))
    row = next(row for row in rows if row["query"] == 2)
    assert (row["winner_source_caption"], row["replaced"], row["replacement"]) == ("a cat on a couch", "cat", "rain")
    table = analysis.word_vulnerability(per_query, layout, "rand_voca", GalleryFacts.of(SkippingSource()))
    assert [(r["word"], r["images"], r["successes"]) for r in table["replaced"] if r["word"] == "cat"] == [("cat", 1, 1)]


def hand_image_galleries():
    """Three caption queries (image 0; image 1 twice) against images 0, 1 and their altered copies 2, 3."""
    layout = gallery_layout("mix_seed1", "text_to_image", [1, 2])
    mix = np.array([[0.5, 0.1, 0.6, 0.2],     # flipped by its own altered copy, margin 0.1
                    [0.2, 0.4, 0.7, 0.3],     # flipped by image 0's altered copy, margin 0.3
                    [0.1, 0.9, 0.2, 0.95]])   # flipped by its own altered copy, margin 0.05
    patch = np.array([[0.5, 0.1, 0.6, 0.2],   # flipped (own copy)
                      [0.2, 0.4, 0.1, 0.3],   # not flipped
                      [0.95, 0.9, 0.2, 0.3]])  # wrong on the clean gallery
    return layout, {"mix_seed1": mix, "patch_seed10": patch}


def test_image_attacks_by_hand():
    layout, scores = hand_image_galleries()
    per_query = {attack: rococo_recall(matrix, **layout.metric_inputs(), k=1, per_query=True)
                 for attack, matrix in scores.items()}
    rows = analysis.flipped_queries(per_query["mix_seed1"], layout, "mix_seed1", GalleryFacts.of(HandSource()))
    assert [(row["query"], row["image"], row["winner_image"], row["partner_image"], row["own_image"])
            for row in rows] == [(1, 1, 0, 1, False), (0, 0, 0, 1, True), (2, 1, 1, 0, True)]
    assert [round(row["margin"], 6) for row in rows] == [0.3, 0.1, 0.05]
    assert rows[0]["query_caption"] == "a dog on a table" and rows[0]["winner_row"] == 2
    table = analysis.image_attack_vulnerability(per_query, {attack: layout for attack in per_query})
    assert [(r["group"], r["galleries"], r["clean_correct"], r["flipped"], r["own_image_wins"]) for r in table] == [
        ("mix", "mix_seed1", 3, 3, 2), ("patch", "patch_seed10", 2, 1, 1),
        ("seed 1", "mix_seed1", 3, 3, 2), ("seed 10", "patch_seed10", 2, 1, 1)]
    assert [r["success_rate"] for r in table] == [100.0, 50.0, 100.0, 50.0]
    renamed = analysis.image_attack_vulnerability({"patch_seed7": per_query["patch_seed10"]}, {"patch_seed7": layout})
    assert [(r["group"], r["flipped"]) for r in renamed] == [("patch", 1), ("seed 7", 1)]  # any seed of a benchmark
    with pytest.raises(ValueError, match="keys must be image attacks named METHOD_seedN .* got 'rand_voca'"):
        analysis.image_attack_vulnerability({"rand_voca": per_query["mix_seed1"]}, {"rand_voca": layout})
    with pytest.raises(ValueError, match="got 'mix_seed07'"):  # one grammar: the catalogue's (no leading zeros)
        analysis.image_attack_vulnerability({"mix_seed07": per_query["mix_seed1"]}, {"mix_seed07": layout})


def test_per_query_export_and_errors(tmp_path):
    layout, scores = hand_text_gallery()
    per_query = rococo_recall(scores, **layout.metric_inputs(), per_query=True)
    key = "rand_voca/image_to_text"
    path = analysis.write_per_query_parquet({key: GalleryResult.of(per_query, layout)}, tmp_path / "per_query.parquet")
    table = pq.read_table(path).to_pydict()
    assert list(table) == list(analysis.PER_QUERY_COLUMNS)
    assert table["query"] == [0, 1, 2, 3] and table["gallery"] == [key] * 4
    assert table["rank"] == [1, 1, 0, 2] and table["clean_rank"] == [0, 0, 0, 1]
    assert table["top_row"] == [9, 13, 5, 15] and table["best_correct_row"] == [0, 2, 5, 7]
    assert table["top_score"] == [0.7, 0.9, 0.8, 0.95] and table["top1_adversarial"] == [True, True, False, True]
    types = {field.name: str(field.type) for field in pq.read_schema(path)}
    assert types == {"gallery": "string", "top1_adversarial": "bool", "top_score": "double",
                     "best_correct_score": "double", **{name: "int64" for name in analysis.PER_QUERY_COLUMNS
                                                         if name not in ("gallery", "top1_adversarial", "top_score",
                                                                         "best_correct_score")}}
    with pytest.raises(ValueError, match=r"`per_query` lacks top_index, top_score.*per_query=True"):
        analysis.flipped_queries({"rank": [0], "clean_rank": [0]}, layout)
    with pytest.raises(ValueError, match=r"one entry per query of the layout \(4\)"):
        analysis.flipped_queries({name: value[:2] for name, value in per_query.items()
                                  if name in PER_QUERY_KEYS}, layout)


def test_the_report_carries_the_analysis(tmp_path, capsys):
    text_layout, text_scores = hand_text_gallery()
    image_layout, image_scores = hand_image_galleries()
    results = {"rand_voca/image_to_text": GalleryResult.of(
        rococo_recall(text_scores, **text_layout.metric_inputs(), per_query=True), text_layout)}
    for attack, matrix in image_scores.items():
        results[f"{attack}/text_to_image"] = GalleryResult.of(
            rococo_recall(matrix, **image_layout.metric_inputs(), k=1, per_query=True), image_layout)
    paths = write_report(build_report(results, {"model": "hand"}, HandSource()), tmp_path)
    assert set(paths) == {"json", "markdown", "model_card", "chart", "per_query", "flipped", "words"}
    document = json.loads(paths["json"].read_text())
    assert "rank" not in document["results"]["rand_voca/image_to_text"]  # per-query arrays live in the Parquet file
    saved = document["analysis"]
    assert saved["per_query_file"] == "per_query.parquet" and saved["flipped_file"] == "flipped.csv"
    assert [row["query"] for row in saved["galleries"]["rand_voca/image_to_text"]["flipped_queries"]] == [1, 0]
    assert saved["by_word"]["rand_voca"]["replaced"][0] == {"word": "man", "images": 2, "successes": 1,
                                                            "success_rate": 50.0}
    assert [row["group"] for row in saved["image_attacks"]] == ["mix", "patch", "seed 1", "seed 10"]
    assert len(pq.read_table(paths["per_query"])) == 4 + 3 + 3
    lines = paths["flipped"].read_text().splitlines()
    assert lines[0].split(",") == list(analysis.FLIPPED_COLUMNS) and len(lines) == 1 + 2 + 3 + 1
    markdown = paths["markdown"].read_text()
    assert "### rand_voca (image-to-text): 2 of 3 queries flipped" in markdown
    assert ("| 1 | 0.3000 | 0.9000 | 0.6000 | a man with a kite | a woman at a **war** | table → war (a caption of "
            "image 2) |\n| 0 | 0.2000 | 0.7000 | 0.5000 | a man on a bike | a **war** on a bike | man → war |") in markdown
    assert "No replaced word has 20 images or more." in markdown
    assert "| mix | mix_seed1 | 3 | 3 | 100.00 | 2 |" in markdown
    assert paths["words"].read_bytes()[:4] == b"\x89PNG"


# RoCOCO size: the real annotation files, against plain loops ----------------------------------------------


def integer_embeddings(num_images, captions_per_image, adversarial_per_image, seed, dim=8):
    """Integer-valued embeddings: captions near their image, adversarial captions near their source caption,
    altered images near their image, so that scores are exact integers with many ties and many flips."""
    rng = np.random.default_rng(seed)
    images = rng.integers(-2, 3, (num_images, dim))
    image_of_caption = np.repeat(np.arange(num_images), captions_per_image)
    captions = images[image_of_caption] + rng.integers(-1, 2, (len(image_of_caption), dim))
    offsets = caption_offsets(captions_per_image)[:-1]
    sources = (offsets[:, None] + np.arange(adversarial_per_image)).ravel()
    adversarial = captions[sources] + rng.integers(-1, 2, (len(sources), dim))
    altered = images + rng.integers(-1, 2, images.shape)
    return [array.astype(np.float32) for array in (images, captions, adversarial, altered)]


def reference_flips(scores_of, layout):
    """From each query's score row, one query at a time: the clean-correct queries, and (query, margin, winning
    column) of each flipped query, the winner being the lowest adversarial column with the row's top score
    (the pessimistic tie rule), largest margin first."""
    adversarial = np.asarray(layout.adversarial)
    clean_correct, flips = [], []
    for query, references in enumerate(layout.references):
        row = scores_of(query)
        correct = np.zeros(len(row), dtype=bool)
        correct[list(references)] = True
        best = row[correct].max()
        if (row[~correct & ~adversarial] >= best).any():
            continue
        clean_correct.append(query)
        if (row[adversarial] >= best).any():
            top = row[adversarial].max()
            winner = int(np.flatnonzero(adversarial & (row == top))[0])
            flips.append((query, float(top) - float(best), winner))
    return clean_correct, sorted(flips, key=lambda flip: (-flip[1], flip[0]))


def reference_words(clean_correct, flips, layout, source, attack):
    """By-word tables by plain loops over the clean-correct images and their own adversarial captions."""
    per_image, ground_truth = source.adversarial_per_image, source.ground_truth_captions()
    adversarial, offsets = source.adversarial_captions(attack), caption_offsets(source.captions_per_image)
    num_gt = int(offsets[-1])
    winners = {query: divmod(int(layout.gallery_rows[column]) - num_gt, per_image) for query, _, column in flips}

    def words(changes, kind):
        if kind == "replaced":
            return {change.original or analysis.INSERTED for change in changes}
        return {change.replacement for change in changes if change.replacement}

    tables = {"replaced": {}, "replacement": {}}
    for image in clean_correct:
        changes = [find_replacements(ground_truth[offsets[image] + j], adversarial[per_image * image + j])
                   for j in range(per_image)]
        owner, j = winners.get(image, (None, None))
        for kind, table in tables.items():
            won = words(changes[j], kind) if owner == image else set()
            for word in set().union(*(words(caption_changes, kind) for caption_changes in changes)):
                images, successes = table.get(word, (0, 0))
                table[word] = (images + 1, successes + (word in won))
    return tables


@pytest.fixture(scope="module")
def rococo_source(annotations_dir):
    return RococoSource(annotations_dir)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["danger", "same_concept"])
def test_text_attack_at_rococo_size_matches_plain_loops(rococo_source, attack):
    source = rococo_source
    layout = source.gallery(attack, "image_to_text", "official")
    images, captions, adversarial, _ = integer_embeddings(source.num_images, source.captions_per_image,
                                                          source.adversarial_per_image, seed=len(attack))
    gallery = np.concatenate([captions, adversarial])[layout.gallery_rows]
    per_query = rococo_recall(query_embeddings=images, gallery_embeddings=gallery, **layout.metric_inputs(),
                              per_query=True)
    clean_correct, expected = reference_flips(lambda query: gallery @ images[query], layout)
    rows = analysis.flipped_queries(per_query, layout, attack, GalleryFacts.of(source))
    assert len(rows) > 200
    assert [(row["query"], row["margin"], row["winner_column"]) for row in rows] == expected
    tables = reference_words(clean_correct, expected, layout, source, attack)
    found = analysis.word_vulnerability(per_query, layout, attack, GalleryFacts.of(source))
    for kind in ("replaced", "replacement"):
        assert {row["word"]: (row["images"], row["successes"]) for row in found[kind]} == tables[kind]
    assert found["flipped"] == len(expected)


@pytest.mark.slow
def test_image_attacks_at_rococo_size_match_plain_loops(rococo_source):
    source = rococo_source
    images, captions, _, altered = integer_embeddings(source.num_images, source.captions_per_image, 5, seed=3)
    per_query, layouts, flips = {}, {}, {}
    for attack in ("mix_seed1", "patch_seed100"):
        layout = layouts[attack] = source.gallery(attack)
        gallery = np.concatenate([images, altered])[layout.gallery_rows]
        per_query[attack] = rococo_recall(query_embeddings=captions, gallery_embeddings=gallery,
                                          **layout.metric_inputs(), per_query=True)
        clean_correct, flips[attack] = reference_flips(lambda query: gallery @ captions[query], layout)
        assert clean_correct == np.flatnonzero(per_query[attack]["clean_rank"] == 0).tolist()
        rows = analysis.flipped_queries(per_query[attack], layout, attack, GalleryFacts.of(source))
        assert len(rows) > 1000
        assert [(row["query"], row["margin"], row["winner_column"]) for row in rows] == flips[attack]
        image_of = np.repeat(np.arange(source.num_images), source.captions_per_image)
        assert [row["partner_image"] for row in rows[:50]] == \
            [source.alteration(column - source.num_images, attack)[0] for _, _, column in flips[attack][:50]]
        assert [row["own_image"] for row in rows] == \
            [column - source.num_images == image_of[query] for query, _, column in flips[attack]]
    table = {row["group"]: row for row in analysis.image_attack_vulnerability(per_query, layouts)}
    assert list(table) == ["mix", "patch", "seed 1", "seed 100"]
    for group, attack in [("mix", "mix_seed1"), ("patch", "patch_seed100"), ("seed 100", "patch_seed100")]:
        clean_correct = int((per_query[attack]["clean_rank"] == 0).sum())
        assert (table[group]["clean_correct"], table[group]["flipped"]) == (clean_correct, len(flips[attack]))
        assert table[group]["success_rate"] == pytest.approx(per_query[attack]["attack_success_rate"])


def test_writing_the_per_query_file_does_not_import_pandas():
    """pyarrow.array imports pandas (about a second of every run) to look for pandas types: the columns are built
    from their buffers instead."""
    import subprocess
    import sys

    code = """if True:
        import sys
        import numpy as np
        from rococo_eval.reporting import analysis
        from rococo_eval.layout import gallery_layout
        from rococo_eval.results import GalleryResult
        key = "clean/text_to_image"
        per_query = {"rank": np.array([0, 2]), "clean_rank": np.array([0, 2]), "top1_adversarial": np.zeros(2, bool),
                     "top_index": np.array([0, 1]), "top_score": np.array([0.9, 0.8]),
                     "best_correct_index": np.array([0, 0]), "best_correct_score": np.array([0.9, 0.5])}
        layout = gallery_layout("clean", "text_to_image", [1, 1])
        analysis.write_per_query_parquet({key: GalleryResult({}, per_query, layout)}, sys.argv[1])
        print("pandas" in sys.modules)
    """
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-c", code, f"{folder}/per_query.parquet"], capture_output=True,
                              text=True, check=True, cwd=REPO_ROOT)
        assert done.stdout.strip() == "False"
        assert pq.read_table(f"{folder}/per_query.parquet").to_pydict()["rank"] == [0, 2]
