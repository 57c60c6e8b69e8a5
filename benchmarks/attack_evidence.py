"""Evidence for the caption attacks (docs/attacks.md, "Evidence").

On the ground-truth captions of the official COCO test file ($ROCOCO_ANNOTATIONS_DIR), compared with the
official attack files:

- source-word agreement: the share of the 25,000 source captions whose replaced token position equals the
  official same_concept file's, for the default attack and for baselines (a uniformly random candidate, mean of
  5 seeds; the first candidate; the last; the highest-influence candidate); per Embedding-Influence variant;
- replacement fidelity: the share of same_concept replacements in the source word's WordNet category
  (lexicographer file) and of diff_concept replacements in another one, ours and official;
- closeness: median, 10th and 90th percentile of cos(E(original), E(adversarial)) with the default encoder,
  ours and official, on the same captions;
- speed: captions per second of ``attack_captions`` (all four strategies), after loading the encoder and a
  warm-up on 5 captions (WordNet read, replacement vocabulary built), whose time is printed too.

Run: ``nice python benchmarks/attack_evidence.py [--image-stride 10] [--cache-dir DIR]``: all 25,010 captions,
or those of every N-th image (evenly spaced, each image with all its captions, so the ground-truth rule
sees them); prints a Markdown table.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

from rococo_eval.attacks import lexicon
from rococo_eval.attacks.captions import DEFAULT_TEXT_ENCODER, TEXT_STRATEGIES, CaptionAttack, attack_captions
from rococo_eval.attacks.influence import DEFAULT_VARIANT, VARIANTS, embed_texts, influence_scores, load_text_encoder
from rococo_eval.attacks.replacements import find_replacements, tokens
from rococo_eval.data.source import RococoSource


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotations-dir", default=os.environ.get("ROCOCO_ANNOTATIONS_DIR"))
    parser.add_argument("--image-stride", type=int, default=1, help="only the captions of every N-th image")
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    source = RococoSource(args.annotations_dir)
    captions = source.ground_truth_captions()
    image_of = [image for image, count in enumerate(source.captions_per_image) for _ in range(count)]
    per_image = source.adversarial_per_image
    first = np.cumsum([0] + list(source.captions_per_image))[:-1]
    rows = [int(first[image]) + j for image in range(len(first)) for j in range(per_image)]
    official = {attack: source.adversarial_captions(attack) for attack in TEXT_STRATEGIES}
    if args.image_stride > 1:
        kept_images = set(range(0, len(first), args.image_stride))
        keep_captions = [i for i, image in enumerate(image_of) if image in kept_images]
        renumber = {old: new for new, old in enumerate(keep_captions)}
        keep = [k for k, row in enumerate(rows) if image_of[row] in kept_images]
        rows = [renumber[rows[k]] for k in keep]
        captions, image_of = [captions[i] for i in keep_captions], [image_of[i] for i in keep_captions]
        official = {attack: [texts[k] for k in keep] for attack, texts in official.items()}
    scope = f"{len(rows):,} source captions" + (f" of every {args.image_stride}th image" if args.image_stride > 1 else "")
    official_changes = {attack: [find_replacements(captions[row], text) for row, text in zip(rows, texts)]
                        for attack, texts in official.items()}
    official_position = [changes[0].position if changes else -1 for changes in official_changes["same_concept"]]

    encoder = load_text_encoder(DEFAULT_TEXT_ENCODER, device="cpu")
    start = time.perf_counter()
    attack_captions(captions[:5], image_of[:5], TEXT_STRATEGIES, encoder=encoder)   # loads WordNet, builds the pools
    warm_up = time.perf_counter() - start
    start = time.perf_counter()
    result = attack_captions(captions, image_of, TEXT_STRATEGIES, encoder=encoder, cache_dir=args.cache_dir)
    elapsed = time.perf_counter() - start
    table = [("speed", f"attack_captions, 4 strategies, {len(captions):,} captions, 2 shared CPU cores",
              f"{len(captions) / elapsed:.1f} captions/s ({elapsed:.0f} s)",
              f"after a {warm_up:.0f} s warm-up on 5 captions (WordNet, vocabulary)")]

    ours = result["same_concept"]
    chosen = [ours[row].replacements[0].position if isinstance(ours[row], CaptionAttack) else -2 for row in rows]
    evidence = [ours[row].candidates if isinstance(ours[row], CaptionAttack) else () for row in rows]
    coverage = np.mean([any(p == pos for _, p, _ in ev) for ev, pos in zip(evidence, official_position)])

    def agreement(picks):
        return 100 * np.mean([pick == pos for pick, pos in zip(picks, official_position)])

    random_runs = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        random_runs.append(agreement([ev[rng.integers(len(ev))][1] if ev else -2 for ev in evidence]))
    table += [
        ("agreement", f"default: lowest Embedding-Influence ({DEFAULT_VARIANT}, MiniLM-L6)", f"{agreement(chosen):.1f}%", scope),
        ("agreement", "baseline: uniformly random candidate (mean of 5 seeds)", f"{np.mean(random_runs):.1f}%", scope),
        ("agreement", "baseline: first candidate", f"{agreement([ev[0][1] if ev else -2 for ev in evidence]):.1f}%", scope),
        ("agreement", "baseline: last candidate", f"{agreement([ev[-1][1] if ev else -2 for ev in evidence]):.1f}%", scope),
        ("agreement", "highest Embedding-Influence instead of lowest",
         f"{agreement([max(ev, key=lambda c: (c[2], -c[1]))[1] if ev else -2 for ev in evidence]):.1f}%", scope),
        ("agreement", "ceiling: official word among our candidates", f"{100 * coverage:.1f}%", scope),
    ]

    subset = list(range(len(rows)))
    sub_rows = [rows[k] for k in subset]
    sub_words = [tokens(captions[row]) for row in sub_rows]
    sub_candidates = [lexicon.candidate_words(captions[row]) for row in sub_rows]
    sub_official = [official_position[k] for k in subset]
    for variant in VARIANTS:
        scores = influence_scores(sub_words, [[c.positions for c in found] for found in sub_candidates], encoder,
                                  variant, cache_dir=args.cache_dir)
        picks = [found[min(range(len(found)), key=lambda k: (values[k], found[k].position))].position if found else -2
                 for found, values in zip(sub_candidates, scores)]
        share = 100 * np.mean([pick == pos for pick, pos in zip(picks, sub_official)])
        table.append(("agreement", f"variant {variant} (MiniLM-L6)", f"{share:.1f}%", scope))

    for attack, same in (("same_concept", True), ("diff_concept", False)):
        mine = [_category_match(captions[row], result[attack][row].replacements, same)
                if isinstance(result[attack][row], CaptionAttack) else None for row in rows]
        theirs = [_category_match(captions[row], changes, same) for row, changes in zip(rows, official_changes[attack])]
        what = "same WordNet category as the source" if same else "another WordNet category than the source"
        table.append(("fidelity", f"{attack}: replacement in {what}", _share(mine), f"official: {_share(theirs)}"))

    for attack in TEXT_STRATEGIES:
        originals = [" ".join(tokens(captions[row])) for row in sub_rows]
        mine = [" ".join(tokens(result[attack][row].caption)) if isinstance(result[attack][row], CaptionAttack)
                else originals[k] for k, row in enumerate(sub_rows)]
        theirs = [" ".join(tokens(official[attack][k])) for k in subset]
        vectors = embed_texts(encoder, originals + mine + theirs, cache_dir=args.cache_dir, name=f"closeness/{attack}")
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        n = len(originals)
        ours_cos = np.sum(vectors[:n] * vectors[n:2 * n], axis=1)
        theirs_cos = np.sum(vectors[:n] * vectors[2 * n:], axis=1)
        table.append(("closeness", f"{attack}: cos(E(original), E(adversarial)) median [p10, p90]",
                      _quantiles(ours_cos), f"official: {_quantiles(theirs_cos)}"))
    collisions = ", ".join(f"{attack} {count}" for attack, count in result.ground_truth_collisions.items())
    table.append(("rule", "generated captions equal to a ground-truth caption of the image (then redrawn)",
                  collisions, "kept: 0"))

    print("| measure | what | ours | note |\n|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


def _category_match(caption: str, changes, same: bool):
    """Whether the (first) replacement's WordNet category equals the source word's (``same``) or differs."""
    if not changes:
        return None
    change = changes[0]
    words = tokens(caption)
    if change.position >= len(words) or " " in change.original or " " in change.replacement:
        return None
    word_tag = lexicon.tag(words)[change.position]
    pos_tag = word_tag if word_tag in lexicon.NOUN_TAGS + lexicon.VERB_TAGS else "NN"
    source_lemma = lexicon.lemma(change.original, pos_tag)
    target_tag = lexicon.lexicon_tag(change.replacement) or pos_tag
    target_tag = target_tag if target_tag in lexicon.NOUN_TAGS + lexicon.VERB_TAGS else pos_tag
    target_lemma = lexicon.lemma(change.replacement, target_tag)
    if source_lemma is None or target_lemma is None:
        return None
    first = lexicon.concept(source_lemma, "n" if pos_tag in lexicon.NOUN_TAGS else "v")
    second = lexicon.concept(target_lemma, "n" if target_tag in lexicon.NOUN_TAGS else "v")
    if first is None or second is None:
        return None
    return (first.lexname == second.lexname) == same


def _share(values) -> str:
    known = [value for value in values if value is not None]
    return f"{100 * np.mean(known):.1f}% of {len(known):,} with both words in WordNet"


def _quantiles(values) -> str:
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return f"{median:.3f} [{p10:.3f}, {p90:.3f}]"


if __name__ == "__main__":
    main()
