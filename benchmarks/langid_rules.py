"""Language-ID rules on the shared bitext: correct pairs kept, wrong-language pairs dropped.

Every line of ``bitext/en-XX/combined.{en,XX}.gz`` (XX in de fr ru zh es ar tr; pairs whose
English side has at least 3 whitespace tokens, the length filter's minimum) is scored once:

* ``raw``: fastText's own ``predict(k=-1, threshold=0)`` on the line as it is;
* ``corrected``: what :class:`ops.language_id.langid.LanguageIdentifier` reads (Arabic marks stripped, a
  kana-less ``ja`` line labelled ``zh``): its top label and probability, and fastText's full
  distribution on the stripped text for the probability and rank of every shared language.

Pairs are grouped by the English side's whitespace tokens: 3-5, 6-10, 11+. For each correct
pair, three wrong-language pairs of the same bucket are built (seeded):

* ``tgt_other``: the XX side replaced by a line of another shared non-English language;
* ``tgt_english``: the XX side replaced by another pair's English line (an untranslated line);
* ``src_foreign``: the English side replaced by a line of one of the seven non-English languages.

A replacement line comes from a pair of the same bucket (by that pair's English length), so
short wrong lines are as short as short correct ones. Each candidate rule decides each side
from (top label is the side's language, top probability, the side's language's probability and
rank, the pair's English tokens); a pair is kept when both sides pass. Reported per rule, pair
and bucket: kept % of correct pairs and dropped % of each kind of wrong pair. The rules
:mod:`ops.language_id.langid` implements (``threshold``, ``top_label``, ``other_language``) are also run
through the implementation itself (``LanguageRule.passes`` on the identifier's batched numbers)
and must agree with their formula here (``implementation_agrees``).

``speed`` times, on a sample of both sides of every language (process CPU, best of
``--repeats``, token cache warm): fastText's ``predict`` with k=1 and with every label, the
batched top label (``predict_label_ids``, Arabic stripping and the kana check included), the
stripping alone, the own-language probabilities the ``other_language`` rule asks for (per line of
the sample), and ``filter_language`` end to end (1 process) under the ``threshold`` and the
``other_language`` rule.

Prints one JSON object (with a ``markdown`` rendering of the tables) on stdout.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _common
import numpy as np
import pyarrow as pa

from ops.language_id.langid import DEFAULT_OTHER_P, DEFAULT_OWN_P

LANGS = ("de", "fr", "ru", "zh", "es", "ar", "tr")
ISSUE_LANGS = ("de", "fr", "ru", "es", "ar", "tr")  # the languages the rules were chosen on
SHARED = ("en", *LANGS)
BUCKETS = ("3-5", "6-10", "11+")
VARIANTS = ("tgt_other", "tgt_english", "src_foreign")
NOT_RANKED = 999

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--languages", default=",".join(LANGS))
    parser.add_argument(
        "--max-per-bucket",
        type=int,
        default=0,
        help="at most this many pairs per language and bucket (seeded sample); 0: all",
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--speed-pairs", type=int, default=4000, help="pairs per language")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-speed", action="store_true")
    _common.add_quick_argument(
        parser, "de, zh and ar, 100 pairs per bucket, speed on 200 pairs each, 1 repeat"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def bucket_of(tokens: np.ndarray) -> np.ndarray:
    """0, 1, 2 for 3-5, 6-10, 11+ English tokens; -1 below 3."""
    return np.select([tokens < 3, tokens <= 5, tokens <= 10], [-1, 0, 1], 2)


@dataclass
class Scores:
    """Per distinct line: the top label (lid code), its probability, and the probability
    (0 below about 1e-5) and rank (0 = top; ``NOT_RANKED`` when absent) of each shared
    language."""

    top: np.ndarray
    top_p: np.ndarray
    p: np.ndarray
    rank: np.ndarray


def full_distribution(model, lines: list[str], chunk: int = 20_000) -> Scores:
    """fastText's ``predict(k=-1, threshold=0)`` of every line, kept for the shared languages."""
    column = {f"__label__{code}": j for j, code in enumerate(SHARED)}
    n = len(lines)
    top = np.empty(n, dtype=object)
    top_p = np.zeros(n, dtype=np.float32)
    p = np.zeros((n, len(SHARED)), dtype=np.float32)
    rank = np.full((n, len(SHARED)), NOT_RANKED, dtype=np.int16)
    for start in range(0, n, chunk):
        labels, probs = model.predict(lines[start : start + chunk], k=-1, threshold=0.0)
        for row, (names, values) in enumerate(zip(labels, probs, strict=True), start):
            top[row] = names[0].removeprefix("__label__") if names else ""
            top_p[row] = values[0] if len(values) else 0.0
            for position, name in enumerate(names):
                j = column.get(name)
                if j is not None:
                    p[row, j] = values[position]
                    rank[row, j] = position
    return Scores(top.astype(str), top_p, p, rank)


def fasttext_model(identifier):
    """fastText's own model of the file ``identifier`` reads (its ``predict`` is the baseline
    the batched identifier is compared with)."""
    import fasttext

    return fasttext.load_model(str(identifier.model_path))


def score_lines(identifier, lines: list[str]) -> dict[str, Scores]:
    """``raw`` and ``corrected`` scores of ``lines`` (see the module docstring)."""
    from ops.language_id.langid import strip_arabic_marks

    started = time.perf_counter()
    model = fasttext_model(identifier)
    raw = full_distribution(model, lines)
    stripped = strip_arabic_marks(pa.array(lines, pa.string())).to_pylist()
    corrected = full_distribution(model, stripped)
    # the implementation's top label (kana check), fastText's own near the rules' thresholds
    ids, probs = identifier.predict_label_ids(pa.array(lines, pa.string()), (0.5, DEFAULT_OTHER_P))
    corrected.top, corrected.top_p = np.array(identifier.label_list)[ids], probs
    log.info("scored %d lines twice in %.0f s", len(lines), time.perf_counter() - started)
    return {"raw": raw, "corrected": corrected}


@dataclass
class Side:
    """One side of a set of pairs: rows into the line table and the expected language."""

    rows: np.ndarray
    expected: str


@dataclass
class PairSet:
    lang: str
    bucket: int
    en_tokens: np.ndarray
    correct: tuple[Side, Side]
    wrong: dict[str, tuple[Side, Side]]


def load_pairs(args: argparse.Namespace, langs: list[str]) -> tuple[list[str], list[PairSet]]:
    """All distinct lines, and per language and bucket the correct and wrong pair sets."""
    rng = np.random.default_rng(args.seed)
    index: dict[str, int] = {}
    lines: list[str] = []

    def row_of(line: str) -> int:
        line = line.replace("\n", " ")
        if line not in index:
            index[line] = len(lines)
            lines.append(line)
        return index[line]

    per_lang = {}
    for lang in langs:
        english, other = _common.read_bitext(args.data_dir, lang)
        tokens = np.array([len(line.split()) for line in english])
        buckets = bucket_of(tokens)
        chosen = {}
        for b in range(len(BUCKETS)):
            pairs = np.flatnonzero(buckets == b)
            if args.max_per_bucket and len(pairs) > args.max_per_bucket:
                pairs = np.sort(rng.choice(pairs, args.max_per_bucket, replace=False))
            chosen[b] = (
                np.array([row_of(english[i]) for i in pairs], dtype=np.int64),
                np.array([row_of(other[i]) for i in pairs], dtype=np.int64),
                tokens[pairs],
            )
        per_lang[lang] = chosen
        log.info("%s: %s pairs per bucket", lang, [len(chosen[b][2]) for b in chosen])

    sets = []
    for lang in langs:
        for b in range(len(BUCKETS)):
            en_rows, xx_rows, tokens = per_lang[lang][b]
            n = len(tokens)
            if not n:
                continue

            def draw(pool_langs: list[str], side: int, n: int = n, b: int = b) -> np.ndarray:
                picked = rng.choice(pool_langs, n)
                rows = np.zeros(n, dtype=np.int64)
                for source in sorted(set(picked.tolist())):
                    where = picked == source
                    pool = per_lang[source][b][side]
                    rows[where] = pool[rng.integers(0, len(pool), where.sum())]
                return rows

            others = [x for x in langs if x != lang] or [lang]
            sets.append(
                PairSet(
                    lang,
                    b,
                    tokens,
                    (Side(en_rows, "en"), Side(xx_rows, lang)),
                    {
                        "tgt_other": (Side(en_rows, "en"), Side(draw(others, 1), lang)),
                        "tgt_english": (Side(en_rows, "en"), Side(draw(langs, 0), lang)),
                        "src_foreign": (Side(draw(langs, 1), "en"), Side(xx_rows, lang)),
                    },
                )
            )
    return lines, sets


# a candidate decides a side from: right (top label is the expected language), top_p, own
# (the expected language's p), rank (its rank), tokens (the pair's English tokens)
Decide = Callable[..., np.ndarray]


def other_language(other_p: float, own_p: float) -> Decide:
    return lambda right, top_p, own, rank, tokens: right | (top_p < other_p) | (own >= own_p)


def threshold(t: float) -> Decide:
    return lambda right, top_p, own, rank, tokens: right & (top_p >= t)


def by_length(short_tokens: int, short: Decide, long: Decide) -> Decide:
    def decide(right, top_p, own, rank, tokens):
        return np.where(
            tokens <= short_tokens,
            short(right, top_p, own, rank, tokens),
            long(right, top_p, own, rank, tokens),
        )

    return decide


CHOSEN = f"other p >= {DEFAULT_OTHER_P} and own p < {DEFAULT_OWN_P} drop (chosen)"
BEFORE = "threshold 0.5 (before)"
CANDIDATES: list[tuple[str, str, Decide]] = [
    (BEFORE, "raw", threshold(0.5)),
    ("top label (raw)", "raw", lambda right, *_: right),
    (
        f"{CHOSEN[: CHOSEN.index(' (')]} (raw)",
        "raw",
        other_language(DEFAULT_OTHER_P, DEFAULT_OWN_P),
    ),
    ("threshold 0.5", "corrected", threshold(0.5)),
    ("top label", "corrected", lambda right, *_: right),
    ("own language in top 2", "corrected", lambda right, top_p, own, rank, tokens: rank < 2),
    ("own language in top 3", "corrected", lambda right, top_p, own, rank, tokens: rank < 3),
    ("own p >= 0.1", "corrected", lambda right, top_p, own, rank, tokens: right | (own >= 0.1)),
    ("own p >= 0.2", "corrected", lambda right, top_p, own, rank, tokens: right | (own >= 0.2)),
    ("other p >= 0.5 drops", "corrected", other_language(0.5, 2.0)),
    ("other p >= 0.7 drops", "corrected", other_language(0.7, 2.0)),
    ("other p >= 0.9 drops", "corrected", other_language(0.9, 2.0)),
    ("other p >= 0.5 and own p < 0.1 drop", "corrected", other_language(0.5, 0.1)),
    ("other p >= 0.4 and own p < 0.1 drop", "corrected", other_language(0.4, 0.1)),
    (CHOSEN, "corrected", other_language(DEFAULT_OTHER_P, DEFAULT_OWN_P)),
    ("other p >= 0.3 and own p < 0.1 drop", "corrected", other_language(0.3, 0.1)),
    ("other p >= 0.25 and own p < 0.1 drop", "corrected", other_language(0.25, 0.1)),
    ("other p >= 0.35 and own p < 0.05 drop", "corrected", other_language(0.35, 0.05)),
    ("other p >= 0.35 and own p < 0.2 drop", "corrected", other_language(0.35, 0.2)),
    (
        "other p >= 0.35 and own p < 0.2 x other p drop",
        "corrected",
        lambda right, top_p, own, rank, tokens: right | (top_p < 0.35) | (own >= 0.2 * top_p),
    ),
    (
        "<= 5 tokens: other p >= 0.5 drops; longer: threshold 0.5",
        "corrected",
        by_length(5, other_language(0.5, 2.0), threshold(0.5)),
    ),
    (
        "<= 10 tokens: chosen; longer: threshold 0.5",
        "corrected",
        by_length(10, other_language(DEFAULT_OTHER_P, DEFAULT_OWN_P), threshold(0.5)),
    ),
    (
        "<= 5 tokens: chosen; longer: top label",
        "corrected",
        by_length(5, other_language(DEFAULT_OTHER_P, DEFAULT_OWN_P), lambda right, *_: right),
    ),
]


def side_passes(decide: Decide, scores: Scores, side: Side, tokens: np.ndarray) -> np.ndarray:
    j = SHARED.index(side.expected)
    return decide(
        scores.top[side.rows] == side.expected,
        scores.top_p[side.rows],
        scores.p[side.rows, j],
        scores.rank[side.rows, j],
        tokens,
    )


def evaluate(decide: Decide, scores: Scores, pairs: PairSet) -> dict:
    def kept(src: Side, tgt: Side) -> float:
        keep = side_passes(decide, scores, src, pairs.en_tokens) & side_passes(
            decide, scores, tgt, pairs.en_tokens
        )
        return float(keep.mean())

    result = {"pairs": len(pairs.en_tokens), "kept_correct": round(100 * kept(*pairs.correct), 2)}
    for variant, sides in pairs.wrong.items():
        result[f"dropped_{variant}"] = round(100 * (1 - kept(*sides)), 2)
    return result


def implementation_check(identifier, lines: list[str], sets: list[PairSet], scores) -> dict:
    """Run the rules ops.language_id.langid implements through the implementation (batched top label,
    ``label_probability`` where the rule asks) and count sides decided differently from the
    formulas above."""
    from ops.language_id.langid import LanguageRule

    text = pa.array(lines, pa.string())
    label_ids, probs = identifier.predict_label_ids(text, (0.5, DEFAULT_OTHER_P))
    codes = np.array(identifier.label_list)[label_ids]
    rules = {
        "threshold 0.5": (LanguageRule("threshold", threshold=0.5), threshold(0.5)),
        "top label": (LanguageRule("top_label"), lambda right, *_: right),
        CHOSEN: (LanguageRule(), other_language(DEFAULT_OTHER_P, DEFAULT_OWN_P)),
    }
    result = {}
    for name, (rule, formula) in rules.items():
        differ = checked = 0
        for expected in SHARED:
            parts = [
                side.rows
                for s in sets
                for side in (*s.correct, *(x for v in s.wrong.values() for x in v))
                if side.expected == expected
            ]
            if not parts:  # a language left out by --languages
                continue
            rows = np.unique(np.concatenate(parts))
            right = codes[rows] == expected
            own = np.full(len(rows), np.nan, dtype=np.float32)
            need = np.flatnonzero(rule.needs_own_probability(right, probs[rows]))
            if len(need):
                own[need] = identifier.label_probability(
                    text.take(pa.array(rows[need])), expected, (rule.own_p,)
                )
            implemented = rule.passes(right, probs[rows], own)
            side = Side(rows, expected)
            by_formula = side_passes(formula, scores, side, np.zeros(len(rows), dtype=np.int64))
            differ += int((implemented != by_formula).sum())
            checked += len(rows)
        result[name] = {"sides_checked": checked, "sides_decided_differently": differ}
    return result


def timed(function, repeats: int) -> float:
    """Best process-CPU seconds of ``repeats`` calls (after one warm-up call)."""
    function()
    times = []
    for _ in range(repeats):
        started = time.process_time()
        function()
        times.append(time.process_time() - started)
    return min(times)


def speed(args: argparse.Namespace, identifier, langs: list[str]) -> dict:
    from ops.language_id.langid import LanguageRule, filter_language, strip_arabic_marks
    from ops.pairs.pair_files import PairWriter

    per_lang = args.speed_pairs
    sides, columns = [], []  # columns: (expected language, one side of one language's pairs)
    for lang in langs:
        en, xx = _common.read_bitext(args.data_dir, lang)
        picked = np.random.default_rng(args.seed).permutation(len(en))[:per_lang]
        sides.append((lang, [en[i] for i in picked], [xx[i] for i in picked]))
        for code, column in (("en", sides[-1][1]), (lang, sides[-1][2])):
            columns.append((code, pa.array([c.replace("\n", " ") for c in column], pa.string())))
    stripped = [strip_arabic_marks(column).to_pylist() for _, column in columns]
    n = sum(len(column) for _, column in columns)
    model = fasttext_model(identifier)

    # the lines whose own-language p the other_language rule asks for (top label another
    # language with p >= other_p), per side as the filter asks for them
    rule = LanguageRule()
    asked_lines = []
    for code, column in columns:
        ids, probs = identifier.predict_label_ids(column, rule.thresholds)
        right = ids == identifier.label_list.index(code)
        need = np.flatnonzero(rule.needs_own_probability(right, probs))
        if len(need):
            asked_lines.append((code, column.take(pa.array(need))))
    asked = sum(len(column) for _, column in asked_lines)

    def each_column(function) -> Callable[[], None]:
        return lambda: [function(column) for _, column in columns]

    def own_only() -> None:
        for code, column in asked_lines:
            identifier.label_probability(column, code, (rule.own_p,))

    result = {
        "lines": n,
        "languages": langs,
        "pairs_per_language": per_lang,
        "share_of_lines_needing_own_p": round(asked / n, 4),
    }
    us = {
        "fasttext_predict_k1": timed(
            lambda: [model.predict(text, k=1) for text in stripped], args.repeats
        ),
        "fasttext_predict_all_labels": timed(
            lambda: [model.predict(text, k=-1, threshold=0.0) for text in stripped], args.repeats
        ),
        "strip_arabic_marks": timed(each_column(strip_arabic_marks), args.repeats),
        "batched_top_label": timed(each_column(identifier.predict_label_ids), args.repeats),
        "own_p_where_the_rule_needs_it": timed(own_only, args.repeats),
    }
    # per line of the whole sample, one side of one language at a time as the filter sees
    # them (the own-language p is computed for a few lines only, Arabic marks in ar lines)
    result["us_per_line"] = {key: round(value / n * 1e6, 3) for key, value in us.items()}
    result["lines_per_s"] = {key: round(n / value) for key, value in us.items() if value > 0}

    with tempfile.TemporaryDirectory() as tmp:
        filters = {}
        for lang, en, xx in sides:
            path = Path(tmp) / f"{lang}.parquet"
            with PairWriter(path, src_lang="en", tgt_lang=lang) as writer:
                writer.write(en, xx)
            filters[lang] = path
        out = Path(tmp) / "out.parquet"
        rules = {"threshold_0.5": {"threshold": 0.5}, "other_language": {"rule": LanguageRule()}}
        walls: dict[str, list[float]] = {name: [] for name in rules}
        cpus: dict[str, list[float]] = {name: [] for name in rules}
        for repeat in range(args.repeats + 1):  # the rules take turns; the first is a warm-up
            for name in sorted(rules, reverse=repeat % 2 == 1):
                wall, cpu = time.perf_counter(), time.process_time()
                for path in filters.values():
                    filter_language(path, out, identifier=identifier, **rules[name])
                if repeat:
                    walls[name].append(time.perf_counter() - wall)
                    cpus[name].append(time.process_time() - cpu)
        chains = {
            name: {
                "pairs_per_s_cpu_best": round(n / 2 / min(cpus[name])),
                "pairs_per_s_cpu_median": round(n / 2 / statistics.median(cpus[name])),
                "pairs_per_s_wall_best": round(n / 2 / min(walls[name])),
                "cpu_s_all": [round(c, 3) for c in cpus[name]],
            }
            for name in rules
        }
        result["filter_language_1_process"] = chains
    return result


def markdown(results: dict, langs: list[str]) -> str:
    out = []
    issue = [x for x in ISSUE_LANGS if x in langs]
    out.append(
        "| rule | kept 3-5 (min of 6 / zh) | kept 6-10 (min) | kept 11+ (min) "
        "| dropped 3-5 (min) | dropped 6-10 (min) | dropped 11+ (min) |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, per in results.items():
        cells = []
        for b in BUCKETS:
            kept = [per[lang][b]["kept_correct"] for lang in issue if b in per[lang]]
            zh = per.get("zh", {}).get(b, {}).get("kept_correct")
            cells.append(f"{min(kept):.1f}" + (f" / {zh:.1f}" if b == "3-5" and zh else ""))
        for b in BUCKETS:
            drops = [
                per[lang][b][f"dropped_{v}"] for lang in langs if b in per[lang] for v in VARIANTS
            ]
            cells.append(f"{min(drops):.1f}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    for name in (BEFORE, CHOSEN):
        out.append("")
        out.append(f"**{name}**: kept % of correct pairs / dropped % of wrong pairs")
        out.append("(tgt_other, tgt_english, src_foreign), per pair and English length")
        out.append("")
        out.append(
            "| pair | pairs 3-5 / 6-10 / 11+ | 3-5 kept | 3-5 dropped | 6-10 kept "
            "| 6-10 dropped | 11+ kept | 11+ dropped |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for lang in langs:
            per = results[name][lang]
            counts = " / ".join(f"{per[b]['pairs']:,}" for b in BUCKETS if b in per)
            cells = []
            for b in BUCKETS:
                r = per.get(b)
                if r is None:
                    cells += ["-", "-"]
                    continue
                cells.append(f"{r['kept_correct']:.1f}")
                cells.append(" / ".join(f"{r[f'dropped_{v}']:.1f}" for v in VARIANTS))
            out.append(f"| en-{lang} | {counts} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    logging.getLogger("ops").setLevel(logging.WARNING)
    if args.quick:
        args.languages = "de,zh,ar"  # a Latin, the kana check's and the Arabic marks' languages
        args.max_per_bucket = args.max_per_bucket or 100
        args.speed_pairs = min(args.speed_pairs, 200)
        args.repeats = 1
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    from ops.language_id.langid import LanguageIdentifier

    langs = [x for x in args.languages.split(",") if x]
    unknown = sorted(set(langs) - set(LANGS))
    if unknown:
        raise SystemExit(f"--languages: {unknown} are not shared bitext languages {LANGS}")
    started = time.perf_counter()
    identifier = LanguageIdentifier()
    lines, sets = load_pairs(args, langs)
    scores = score_lines(identifier, lines)
    results: dict[str, dict] = {}
    for name, text, decide in CANDIDATES:
        per = results.setdefault(name, {})
        for pairs in sets:
            per.setdefault(pairs.lang, {})[BUCKETS[pairs.bucket]] = evaluate(
                decide, scores[text], pairs
            )
    agreement = implementation_check(identifier, lines, sets, scores["corrected"])
    result = {
        "benchmark": "langid_rules",
        "machine": _common.machine_info(),
        "parameters": {
            "languages": langs,
            "max_per_bucket": args.max_per_bucket,
            "seed": args.seed,
            "distinct_lines": len(lines),
        },
        "candidates": {name: text for name, text, _ in CANDIDATES},
        "results": results,
        "implementation_agrees": agreement,
    }
    if not args.skip_speed:
        result["speed"] = speed(args, identifier, langs)
    result["markdown"] = markdown(results, langs)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["machine"]["loadavg_at_end"] = _common.loadavg()
    _common.emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
