"""Graded questions of chapter 3, "The data pipeline". References come from course_lib.data."""
from __future__ import annotations

from course_lib.data import crawl, dedup, quality, shards
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import join, lit, msg, series

JACCARD_A = "The cat sat on the mat."
JACCARD_B = "the cat sat on a mat"

# ---------------------------------------------------------------------------- LSH (b, r) choice
LSH_NUM_PERM, LSH_HIGH, LSH_LOW = 128, (0.85, 0.95), (0.5, 0.05)


def _grade_lsh_choice(answer) -> tuple[float, str]:
    try:
        b, r = (int(v) for v in answer)
    except (TypeError, ValueError):
        return 0.0, msg("Give a pair (bands, rows) of integers, got {answer}.", answer=repr(answer))
    if b < 1 or r < 1:
        return 0.0, "bands and rows must both be at least 1."
    if b * r > LSH_NUM_PERM:
        return 0.0, msg("bands × rows = {product} > {perm}: the signature has only {perm} minhashes to "
                        "cut into bands.", product=b * r, perm=LSH_NUM_PERM)
    hi, lo = dedup.s_curve(LSH_HIGH[0], b, r), dedup.s_curve(LSH_LOW[0], b, r)
    ok_hi, ok_lo = hi >= LSH_HIGH[1], lo <= LSH_LOW[1]
    probs = msg("P(candidate | J=0.85) = {hi:.3f}, P(candidate | J=0.5) = {lo:.3f}.", hi=hi, lo=lo)
    if ok_hi and ok_lo:
        return 1.0, probs
    if not ok_hi and not ok_lo:
        return 0.0, join(probs, "Both constraints fail.")
    if not ok_hi:
        return 0.5, join(probs, "Too strict: too few near-duplicates are caught. More bands (or fewer "
                                "rows per band) raise the curve.")
    return 0.5, join(probs, "Too lenient: too many dissimilar pairs become candidates. More rows per "
                            "band make the curve steeper and push it right.")


# ---------------------------------------------------------------------------- why dedup helps
DEDUP_STATEMENTS = {
    "A": "At a fixed token budget, removing copies lets the model see more distinct text.",
    "B": "Text repeated many times is memorised: its loss falls far below held-out loss.",
    "C": "Deduplication makes each training step faster, because a step processes fewer tokens.",
    "D": "Every downstream stage (tokenisation, storage, shard I/O) shrinks with the data removed.",
    "E": "Removing copies of evaluation text from the training set keeps validation loss honest.",
    "F": "MinHash-LSH guarantees that no two kept documents share a sentence.",
}
DEDUP_TRUE = {"A", "B", "D", "E"}
_WHY_FALSE = {
    "C": msg("C is false: a step costs 6N FLOPs per token whatever the tokens are; dedup saves steps "
             "(or buys more distinct tokens per step), not time per step."),
    "F": msg("F is false: MinHash-LSH compares whole documents probabilistically; shared sentences "
             "(boilerplate, quotes) survive unless you also dedup at the line or substring level."),
}


def _grade_dedup_why(answer) -> tuple[float, str]:
    if isinstance(answer, str):
        chosen = {c for c in answer.upper() if c.isalpha()}
    else:
        try:
            chosen = {str(c).strip().upper() for c in answer}
        except TypeError:
            return 0.0, msg("Give the letters of the true statements, e.g. {example}; got {answer}.",
                            example="{'A', 'B'}", answer=repr(answer))
    unknown = chosen - set(DEDUP_STATEMENTS)
    if unknown:
        return 0.0, msg("Unknown statement letters: {letters}.", letters=sorted(unknown))
    right = len(chosen & DEDUP_TRUE) - len(chosen - DEDUP_TRUE)
    notes = [_WHY_FALSE[c] for c in sorted(chosen - DEDUP_TRUE)]
    missed = sorted(DEDUP_TRUE - chosen)
    if missed:
        notes.append(msg("You left out true statement(s) {letters}.", letters=", ".join(missed)))
    return max(0.0, right / len(DEDUP_TRUE)), series(notes, " ")


# ---------------------------------------------------------------------------- a quality rule
EDGE_CASES = [  # (text, keep?, what a wrong answer on it usually means)
    ("THE results AND the conclusions follow " * 10, True, msg("compare case-insensitively")),
    ("Of course, this works; with care..." + " more words here" * 12, True,
     msg("strip punctuation around words ('Of,' is 'of')")),
    ("the the the the spam spam spam " * 10, False, msg("count distinct stop words, not occurrences")),
    ("theory android tothe bethe andes " * 12, False,
     msg("match whole words: 'theory' does not contain the word 'the'")),
    ("", False, msg("an empty document has no stop words")),
]


def labelled_examples() -> list[tuple[str, bool, str]]:
    """Edge cases plus pages of the course crawl: word salads and spam (drop) and originals (keep)."""
    c = crawl.build_crawl(0)
    out = list(EDGE_CASES)
    picks = {"word_salad": 6, "spam": 4, "original": 10}
    for page in c:
        if picks.get(page.kind, 0) > 0:
            text = dedup.decode_page(page.raw, page.charset)
            if page.kind == "original" and len(text.split()) < 50:
                continue
            picks[page.kind] -= 1
            out.append((text, page.kind == "original", msg("a crawl page of kind {kind}", kind=repr(page.kind))))
    return out


def _grade_stop_word_rule(fn) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, msg("Give a function text -> bool, got {type}.", type=type(fn).__name__)
    examples = labelled_examples()
    wrong = [why for text, keep, why in examples if bool(fn(text)) != keep]
    if not wrong:
        return 1.0, msg("all {n} labelled examples classified correctly.", n=len(examples))
    frac = 1 - len(wrong) / len(examples)
    return frac, msg("{wrong} of {n} examples wrong; e.g. {why}.", wrong=len(wrong), n=len(examples), why=lit(wrong[0]))


QUESTIONS = [
    Question(
        "jaccard_shingles", points=1, unit="fraction",
        prompt=f"Jaccard similarity of the word 2-shingle sets of {JACCARD_A!r} and {JACCARD_B!r} "
               "(words = runs of letters, case-folded).",
        expected=lambda: dedup.jaccard(dedup.shingles(JACCARD_A, 2), dedup.shingles(JACCARD_B, 2)),
        rtol=0.01,
        mistakes=[Mistake.equals(0.6, "0.6 = 3/5 is |A∩B|/|A| (containment), or Dice 2|A∩B|/(|A|+|B|); "
                                      "Jaccard divides by the union, |A∪B| = 7."),
                  Mistake.equals(5 / 6, "That is the Jaccard of the word *sets* (1-shingles); use pairs "
                                        "of consecutive words."),
                  Mistake.equals(0.3, "0.3 = 3/10 divides by |A|+|B|, which counts the shared shingles twice."),
                  Mistake.equals(0.25, "0.25 = 2/8: you kept 'The' and 'the' apart; case-fold first.")],
        hint="List the 5 consecutive word pairs of each sentence; Jaccard = |A∩B| / |A∪B|.",
    ),
    Question(
        "lsh_candidate_prob", points=1, unit="probability",
        prompt="datatrove's default LSH uses 14 bands of 8 rows (112 minhashes). Probability that two "
               "documents with Jaccard 0.75 become a candidate pair?",
        expected=lambda: dedup.s_curve(0.75, bands=14, rows=8), rtol=0.005,
        mistakes=[Mistake.equals(dedup.s_curve(0.75, bands=8, rows=14), "Bands and rows swapped: 14 bands "
                                 "of 8 rows means s^8 per band, and 14 chances.", rtol=0.005),
                  Mistake.equals((1 - 0.75 ** 8) ** 14, "That is the probability of *no* band matching; "
                                 "take 1 minus it.", rtol=0.005),
                  Mistake.equals(0.75 ** 8, "That is one band; there are 14 independent chances.", rtol=0.005),
                  Mistake.predicate(lambda a: a > 1, "A probability above 1: 14 × 0.75^8 is a union bound, "
                                    "not the probability.")],
        hint="P(one band agrees) = s^r; P(some band agrees) = 1 − (1 − s^r)^b.",
    ),
    Question(
        "lsh_choose", points=2,
        prompt="With 128 minhashes, choose (bands, rows), bands·rows ≤ 128, so that pairs with Jaccard "
               "0.85 become candidates with probability ≥ 0.95 and pairs with Jaccard 0.5 with "
               "probability ≤ 0.05. Answer a tuple (bands, rows).",
        grader=_grade_lsh_choice,
        hint="Fix rows r; the J=0.85 constraint gives a minimum number of bands, the J=0.5 constraint a "
             "maximum. Try r from 6 to 10.",
    ),
    Question(
        "shard_count", points=2, unit="files",
        prompt="15.6T tokens (Llama 3), vocabulary 128,256, stored as the smallest unsigned integer type, "
               "in shard files of at most 2 GiB holding whole rows of 8,193 tokens. How many shard files?",
        expected=lambda: float(shards.plan_shards(15.6e12, 128_256, 2 ** 31, seq_len=8192).n_shards),
        rtol=0, atol=0.5,
        mistakes=[Mistake.ratio(0.5, "About half: 128,256 ids do not fit in uint16 (max 65,535); "
                                     "you need uint32, 4 bytes per token.", rtol=0.001),
                  Mistake.ratio(2 ** 31 / 2e9, "You used 2 GB = 2·10^9 bytes; 2 GiB = 2^31 = 2,147,483,648.",
                                rtol=0.001),
                  Mistake.predicate(lambda a, e: abs(a - (e - 1)) < 0.5,
                                    "One short: round *up*, the last shard holds the remainder.")],
        hint="bytes per token from the vocabulary size; tokens per shard = whole rows in 2^31 bytes; "
             "shards = ceil(tokens / tokens per shard).",
    ),
    Question(
        "dedup_why", points=2,
        prompt="Which statements about deduplication are true? Answer a set of letters.\n"
               + "\n".join(f"{k}. {v}" for k, v in DEDUP_STATEMENTS.items()),
        grader=_grade_dedup_why,
        hint="Think of the lab: same token budget, different val loss; loss on the repeated pages; and "
             "what a training step costs per token.",
    ),
    Question(
        "stop_word_rule", points=3,
        prompt="Implement Gopher's stop-word rule: keep(text) -> bool is True iff the text contains at "
               f"least 2 *distinct* words of {quality.STOP_WORDS}, matching whole words after "
               "case-folding and stripping surrounding punctuation. Graded on labelled examples.",
        grader=_grade_stop_word_rule,
        hint="Split on whitespace, strip punctuation at both ends of each word, lower-case, build a set, "
             "intersect with the stop words.",
    ),
]
