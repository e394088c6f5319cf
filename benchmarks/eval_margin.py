"""Tatoeba error rates by cosine vs ratio-margin retrieval, with the same model.

Trains a small P-SP model briefly on several of the shared bitext languages (default de, es,
fr, ru: they share subwords or script with the shared Tatoeba languages ita, nld, por, pol, ukr,
bul), or loads one with ``--model``, then evaluates every Tatoeba language in
``<data-dir>/eval/tatoeba`` by nearest-neighbour retrieval in both directions with plain cosine
and with the ratio margin of Artetxe and Schwenk (2019), k = ``--k``. The untrained model (same
vocabulary, initial table) is reported too, and STS 2017 en-en for context.

    python benchmarks/eval_margin.py [--langs de,es,fr,ru] [--pairs-per-lang 40000] [--model DIR]

Prints one JSON object on stdout; the trained model is cached under
``benchmarks/results/eval_margin-...``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from itertools import islice
from pathlib import Path

import _common

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--model", type=Path, help="evaluate this bundle instead of training")
    parser.add_argument("--langs", default="de,es,fr,ru")
    parser.add_argument("--pairs-per-lang", type=int, default=40_000)
    parser.add_argument("--vocab-size", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    _common.add_quick_argument(
        parser, "de and es, 1,000 pairs each, vocabulary 1,000, dim 32, one epoch"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.langs, args.pairs_per_lang = "de,es", 1000
        args.vocab_size, args.dim = _common.QUICK_VOCAB_SIZE, _common.QUICK_DIM
    return args


def read_pairs(data_dir: Path, lang: str, limit: int, seed: int) -> list[tuple[str, str]]:
    """Up to ``limit`` non-empty pairs spread over the whole en-``lang`` corpus (every n-th)."""
    from ops.sources.text_io import read_aligned

    folder = data_dir / "bitext" / f"en-{lang}"
    english, other = folder / "combined.en.gz", folder / f"combined.{lang}.gz"
    total = sum(1 for _ in read_aligned(english, other))
    step = max(1, total // limit)
    pairs = [
        p for p in islice(read_aligned(english, other), 0, None, step) if all(map(str.strip, p))
    ]
    return pairs[:limit]


def train_model(args: argparse.Namespace, work: Path) -> tuple[Path, Path, dict]:
    """Train (or reuse) the multilingual model; returns (trained, untrained, info)."""
    from ops.training_data.packing import pack_pairs
    from ops.training_data.sentencepiece_model import train_sentencepiece
    from psp_core import Tokenizer, TrainConfig, train

    trained, untrained = work / "model", work / "untrained"
    info: dict = {"work_dir": str(work)}
    if trained.is_dir() and untrained.is_dir():
        info["cached"] = True
        return trained, untrained, info
    started = time.perf_counter()
    pairs, counts = [], {}
    for lang in args.langs.split(","):
        chunk = read_pairs(args.data_dir, lang, args.pairs_per_lang, args.seed)
        counts[lang] = len(chunk)
        pairs += chunk
    random.Random(args.seed).shuffle(pairs)
    info["pairs"] = counts
    spm_path = train_sentencepiece(
        (s.lower() for pair in pairs for s in pair), work / "spm.model", vocab_size=args.vocab_size
    )
    data = work / "train.h5"
    pack_pairs(pairs, Tokenizer.from_file(spm_path), data, lang="+".join(args.langs.split(",")))
    config = dict(
        dim=args.dim, lr=args.lr, max_megabatch=20, anneal_every=20, log_every=200, seed=args.seed
    )
    train(data, spm_path, untrained, TrainConfig(**config, max_steps=0))
    train(data, spm_path, trained, TrainConfig(**config, epochs=args.epochs))
    info["train_seconds"] = round(time.perf_counter() - started, 1)
    info["cached"] = False
    return trained, untrained, info


def tatoeba_table(model_path: Path, eval_dir: Path, k: int) -> dict:
    from psp_core import load_model
    from psp_core.evaluation import evaluate_model, tatoeba_errors
    from psp_core.evaluation.suites.tatoeba import read_tatoeba, tatoeba_languages

    model = load_model(model_path)
    table = {}
    for lang in tatoeba_languages(eval_dir / "tatoeba"):
        other, english = read_tatoeba(eval_dir / "tatoeba", lang)
        score = tatoeba_errors(
            model.embed(other, normalize=True), model.embed(english, normalize=True), k=k
        )
        table[lang] = {key: round(value, 2) for key, value in score.as_dict().items()}
    sts = evaluate_model(model, eval_dir, ["sts17"]).sts17.get("en-en")
    langs = list(table)
    return {
        "tatoeba": table,
        "mean_over_languages": {
            "cosine": round(sum(table[x]["cosine_mean"] for x in langs) / len(langs), 2),
            "margin": round(sum(table[x]["margin_mean"] for x in langs) / len(langs), 2),
        },
        "languages_where_margin_is_better": [
            x for x in langs if table[x]["margin_mean"] < table[x]["cosine_mean"]
        ],
        "languages_where_margin_is_worse": [
            x for x in langs if table[x]["margin_mean"] > table[x]["cosine_mean"]
        ],
        "sts17_en_en_pearson": round(sts.pearson, 2) if sts else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if _common.require_data(args.data_dir, "eval", "tatoeba") is None:
        return 0
    eval_dir = _common.eval_dir_for(args)
    result: dict = {"benchmark": "eval_margin", "machine": _common.machine_info(), "k": args.k}
    if args.model:
        result["model"] = {"path": str(args.model), "trained_here": False}
        result["trained"] = tatoeba_table(args.model, eval_dir, args.k)
    else:
        for lang in args.langs.split(","):
            if _common.require_data(args.data_dir, "bitext", f"en-{lang}") is None:
                return 0
        tag = (
            f"eval_margin-{args.langs.replace(',', '')}-{args.pairs_per_lang}-v{args.vocab_size}"
            f"-d{args.dim}-e{args.epochs}-lr{args.lr}-s{args.seed}"
        )
        work = args.results_dir / tag
        work.mkdir(parents=True, exist_ok=True)
        trained, untrained, info = train_model(args, work)
        result["model"] = {
            "path": str(trained),
            "trained_here": True,
            "langs": args.langs.split(","),
            "pairs_per_lang": args.pairs_per_lang,
            "vocab_size": args.vocab_size,
            "dim": args.dim,
            "epochs": args.epochs,
            "lr": args.lr,
            **info,
        }
        result["untrained"] = tatoeba_table(untrained, eval_dir, args.k)
        result["trained"] = tatoeba_table(trained, eval_dir, args.k)
    result["loadavg_at_end"] = _common.loadavg()
    _common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
