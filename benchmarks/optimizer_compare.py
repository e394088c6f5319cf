"""Dense Adam vs sparse (lazy) Adam on real data: the same epochs and the same wall time.

Trains the same model (the en-de bitext of ../shared/data, shuffled; the 50k sentencepiece
model; dim 1024; the paper's batch 128, margin 0.4, mega-batch annealing 1 -> 100 every 150
steps, gradient clip 5) once per optimizer at the paper's learning rate, and evaluates it after
every epoch: STS 2012-2014 (mean of the three years' means) and STS 2017 en-en (Pearson x 100),
and the Tatoeba error rate (mean of both directions, cosine) on the held-out languages of
../shared/data (none is German: a sanity check only, Dutch the closest).

The first optimizer (``--optimizers``, default dense first) trains ``--epochs`` epochs; the
second trains at least as many, and goes on until its training time reaches the first's, so
the table answers both questions: which is better after the same epochs, and which after the
same minutes. Training time is wall time of the epochs (checkpoint writes included, the
evaluations after them not).

    python benchmarks/optimizer_compare.py [--epochs 5] [--lr 0.001] [--optimizers dense,sparse]
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
from psp_core import Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator
from psp_core.evaluation.suites.tatoeba import evaluate_tatoeba, tatoeba_languages

STS_YEARS = ("2012", "2013", "2014")


class EnoughTraining(Exception):
    """Raised from the epoch evaluator to end a run once it has trained long enough."""


class EpochEvaluator:
    """Scores the model after each epoch and keeps the training clock (evaluation excluded)."""

    def __init__(self, eval_dir: Path, stop_after_epochs: int, stop_after_seconds: float):
        self.eval_dir = eval_dir
        self.sts_years = {
            year: [StsEvaluator(f) for f in sorted((eval_dir / "sts" / year).glob("*.tsv"))]
            for year in STS_YEARS
        }
        self.sts17 = StsEvaluator(eval_dir / "sts17" / "en-en.tsv")
        self.tatoeba = tatoeba_languages(eval_dir / "tatoeba")
        self.stop_after_epochs = stop_after_epochs
        self.stop_after_seconds = stop_after_seconds
        self.records: list[dict] = []
        self.train_seconds = 0.0
        self.clock = time.perf_counter()

    def scores(self, model) -> dict:
        year_means = [np.mean([e(model) for e in self.sts_years[y]]) for y in STS_YEARS]
        tatoeba = evaluate_tatoeba(model, self.eval_dir, [], languages=self.tatoeba)
        return {
            "sts12_14": round(float(np.mean(year_means)), 2),
            **{
                f"sts{y[2:]}": round(float(m), 2)
                for y, m in zip(STS_YEARS, year_means, strict=True)
            },
            "sts17_en_en": round(self.sts17(model), 2),
            "tatoeba_error": round(float(np.mean([s.cosine_mean for s in tatoeba.values()])), 2),
            "tatoeba_nld_error": round(tatoeba["nld"].cosine_mean, 2) if "nld" in tatoeba else None,
        }

    def __call__(self, model) -> float:
        self.train_seconds += time.perf_counter() - self.clock
        record = {"epoch": len(self.records) + 1, "train_s": round(self.train_seconds, 1)}
        record.update(self.scores(model))
        self.records.append(record)
        _common.log.info("%s", record)
        self.clock = time.perf_counter()
        if (
            record["epoch"] >= self.stop_after_epochs
            and self.train_seconds >= self.stop_after_seconds
        ):
            raise EnoughTraining
        return record["sts17_en_en"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--max-epochs", type=int, default=40, help="cap for the second run")
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--optimizers", default="dense,sparse")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    _common.add_quick_argument(
        parser,
        f"the quick sentencepiece model, {_common.QUICK_PAIRS:,} pairs, dim 32, one epoch "
        "(at most 2 for the "
        "second optimizer), 1 thread",
    )
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.dim, args.epochs, args.max_epochs = _common.QUICK_PAIRS, 32, 1, 2
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
    first, second = args.optimizers.split(",")
    runs = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        data = work / "train.h5"
        pack_pairs(pairs, tokenizer, data, lang="de")
        base = dict(
            dim=args.dim, lr=args.lr, log_every=0, checkpoint_every=0, num_threads=args.threads
        )
        untrained = EpochEvaluator(eval_dir, 0, 0.0)
        result = train(data, spm_path, work / "init", TrainConfig(**base, max_steps=0))
        initial = untrained.scores(load_model(result.bundle))
        budget = float("inf")
        for optimizer in (first, second):
            epochs = args.epochs if optimizer == first else args.max_epochs
            evaluator = EpochEvaluator(eval_dir, args.epochs, budget)
            try:
                train(
                    data,
                    spm_path,
                    work / optimizer,
                    TrainConfig(**base, optimizer=optimizer, epochs=epochs),
                    dev_evaluator=evaluator,
                )
            except EnoughTraining:
                pass
            runs[optimizer] = evaluator.records
            if optimizer == first:
                budget = evaluator.train_seconds
    at_epochs = {name: records[args.epochs - 1] for name, records in runs.items()}
    # the second run's epoch whose training time is closest to the first run's total
    same_time = min(runs[second], key=lambda r: abs(r["train_s"] - budget))
    _common.emit(
        {
            "benchmark": "optimizer_compare",
            "machine": _common.machine_info(),
            "pairs": len(pairs),
            "dim": args.dim,
            "lr": args.lr,
            "vocab_size": tokenizer.vocab_size,
            "spm": spm_info,
            "schedule": "paper: mega-batch 1 -> +1 every 150 steps (max 100), batch 128, clip 5",
            "untrained": initial,
            "runs": runs,
            "same_epochs": at_epochs,
            "same_time": {first: at_epochs[first], second: same_time},
        }
    )


if __name__ == "__main__":
    main()
