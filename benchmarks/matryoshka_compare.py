"""Matryoshka dimensions on real data: a model trained with the loss summed over nested prefixes
(1024, 512, 256, 128, 64) against the paper's loss, same data, same epochs, evaluated at 1024,
256 and 64 dimensions.

Both train on the en-de bitext of ../shared/data (shuffled), the 50k sentencepiece model, dim
1024, the paper's batch 128, margin 0.4 and mega-batch annealing, at the demo profile's learning
rate (0.05) for ``--epochs`` epochs each; their training times are reported side by side (the
nested loss adds a few cosines per mini-batch). At each dimension ``d`` a model is evaluated on
its vectors' first ``d`` dimensions (exact: the mean of the pieces' prefixes is the prefix of
their mean): STS 2012-2014 (mean of the years' means) and STS 2017 en-en (Pearson x 100), and
the Tatoeba error rate (mean of both directions) on ../shared/data's Tatoeba languages (German
is not among them: a sanity check).

Goal: truncated to 256 dimensions, the Matryoshka model keeps >= 98% of its
1024-dimension STS score, and its 1024-dimension score is at most 0.5 points below the plain
model's.

    python benchmarks/matryoshka_compare.py [--epochs 3] [--dims 512,256,128,64]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import _common
import numpy as np

from ops.training_data.packing import pack_pairs
from psp_core import PSPModel, Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator
from psp_core.evaluation.suites.tatoeba import evaluate_tatoeba, tatoeba_languages
from psp_core.models.bundle import BundleConfig

STS_YEARS = ("2012", "2013", "2014")


def eval_dims(dim: int) -> tuple[int, int, int]:
    """The dimensions a model is scored at: all of them, a quarter, a sixteenth (1024, 256, 64
    at the paper's dim)."""
    return dim, dim // 4, dim // 16


def truncated(model: PSPModel, dim: int) -> PSPModel:
    """The model whose vectors are ``model``'s first ``dim`` dimensions."""
    if dim >= model.dim:
        return model
    table = model.weight.cpu().numpy()[:, :dim]
    config = BundleConfig(**{**vars(model.config), "dim": dim})
    return PSPModel(model.tokenizer, table, config)


def scores(model: PSPModel, eval_dir: Path) -> dict:
    years = {
        year: [StsEvaluator(f) for f in sorted((eval_dir / "sts" / year).glob("*.tsv"))]
        for year in STS_YEARS
    }
    year_means = [np.mean([evaluate(model) for evaluate in years[y]]) for y in STS_YEARS]
    tatoeba = evaluate_tatoeba(
        model, eval_dir, [], languages=tatoeba_languages(eval_dir / "tatoeba")
    )
    return {
        "sts12_14": round(float(np.mean(year_means)), 2),
        "sts17_en_en": round(StsEvaluator(eval_dir / "sts17" / "en-en.tsv")(model), 2),
        "tatoeba_error": round(float(np.mean([s.cosine_mean for s in tatoeba.values()])), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--dims", default="512,256,128,64", help="the nested prefixes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=1024)
    _common.add_quick_argument(
        parser,
        f"the quick sentencepiece model, {_common.QUICK_PAIRS:,} pairs, dim 64 (prefixes 16, 4), "
        "one epoch",
    )
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.epochs, args.dim, args.dims = _common.QUICK_PAIRS, 1, 64, "16,4"
        args.threads = 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    eval_dir = _common.eval_dir_for(args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    spm_path, spm_info = (
        _common.quick_spm_model(args.data_dir, args.results_dir)
        if args.quick
        else _common.spm_model(args.data_dir, args.results_dir)
    )
    tokenizer = Tokenizer.from_file(spm_path)
    english, german = _common.read_bitext(args.data_dir, "de")
    pairs = [p for p in zip(english, german, strict=True) if p[0].strip() and p[1].strip()]
    random.Random(0).shuffle(pairs)
    pairs = pairs[: args.pairs]
    nested_dims = tuple(int(d) for d in args.dims.split(","))
    runs = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        data = work / "train.h5"
        pack_pairs(pairs, tokenizer, data, lang="de")
        base = dict(
            dim=args.dim,
            lr=args.lr,
            epochs=args.epochs,
            log_every=0,
            checkpoint_every=0,
            num_threads=args.threads,
        )
        for name, dims in (("plain", None), ("matryoshka", nested_dims)):
            started = time.perf_counter()
            result = train(data, spm_path, work / name, TrainConfig(**base, matryoshka_dims=dims))
            seconds = time.perf_counter() - started
            model = load_model(result.bundle)
            runs[name] = {
                "train_s": round(seconds, 1),
                "matryoshka_dims": list(dims) if dims else None,
                "final_loss": round(result.state.history[-1]["loss"], 4),
                "at_dim": {d: scores(truncated(model, d), eval_dir) for d in eval_dims(args.dim)},
            }
            _common.log.info("%s: %s", name, runs[name])
    nested, plain = runs["matryoshka"]["at_dim"], runs["plain"]["at_dim"]
    full, quarter, _ = eval_dims(args.dim)
    _common.emit(
        {
            "benchmark": "matryoshka_compare",
            "machine": _common.machine_info(),
            "pairs": len(pairs),
            "epochs": args.epochs,
            "lr": args.lr,
            "vocab_size": tokenizer.vocab_size,
            "spm": spm_info,
            "runs": runs,
            "goals": {
                f"sts_{quarter}_over_{full}_matryoshka": round(
                    nested[quarter]["sts12_14"] / nested[full]["sts12_14"], 4
                ),
                f"sts_{quarter}_over_{full}_plain": round(
                    plain[quarter]["sts12_14"] / plain[full]["sts12_14"], 4
                ),
                f"sts_{full}_change": round(nested[full]["sts12_14"] - plain[full]["sts12_14"], 2),
            },
        }
    )


if __name__ == "__main__":
    main()
