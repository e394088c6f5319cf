"""Dense Adam vs sparse (lazy) Adam on real data: quality (STS) and speed, same run.

Trains the same model (en-de bitext from ../shared/data, 50k sentencepiece vocabulary, dim
1024, the paper's schedule) once per optimizer and learning rate, for the same number of
pairs, and reports STS 2017 en-en and the STS 2012-2014 mean (Pearson x 100) beside the
untrained model, with training pairs/s and wall time.

    python benchmarks/optimizer_compare.py [--pairs 95000] [--lrs 0.001,0.01] [--dim 1024]
"""

from __future__ import annotations

import argparse
import glob
import random
import tempfile
import time
from pathlib import Path

import _common
import numpy as np

from ops.packing import pack_pairs
from psp_core import Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator


def sts(model, eval_dir: Path) -> dict:
    per_year = {
        year: float(
            np.mean(
                [
                    StsEvaluator(f)(model)
                    for f in sorted(glob.glob(str(eval_dir / "sts" / year / "*.tsv")))
                ]
            )
        )
        for year in ("2012", "2013", "2014")
    }
    return {
        "sts17_en_en": round(StsEvaluator(eval_dir / "sts17" / "en-en.tsv")(model), 2),
        "sts12_14_mean": round(float(np.mean(list(per_year.values()))), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=_common.DEFAULT_DATA_DIR)
    parser.add_argument("--results-dir", type=Path, default=_common.DEFAULT_RESULTS_DIR)
    parser.add_argument("--pairs", type=int, default=95_000, help="training pairs (one epoch)")
    parser.add_argument("--lrs", default="0.001,0.01")
    parser.add_argument("--optimizers", default="sparse,dense")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    eval_dir = args.data_dir / "eval"
    args.results_dir.mkdir(parents=True, exist_ok=True)
    spm_path, spm_info = _common.spm_model(args.data_dir, args.results_dir)
    tokenizer = Tokenizer.from_file(spm_path)
    english, german = _common.read_bitext(args.data_dir, "de")
    pairs = [p for p in zip(english, german, strict=True) if p[0].strip() and p[1].strip()]
    random.Random(0).shuffle(pairs)
    pairs = pairs[: args.pairs]
    runs = []
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        data = work / "train.h5"
        pack_pairs(pairs, tokenizer, data, lang="de")
        base = dict(
            dim=args.dim, epochs=1, log_every=0, checkpoint_every=0, num_threads=args.threads
        )
        untrained = train(data, spm_path, work / "init", TrainConfig(**base, max_steps=0))
        initial = sts(load_model(untrained.bundle), eval_dir)
        for lr in (float(x) for x in args.lrs.split(",")):
            for optimizer in args.optimizers.split(","):
                started = time.perf_counter()
                result = train(
                    data,
                    spm_path,
                    work / f"{optimizer}-{lr}",
                    TrainConfig(**base, lr=lr, optimizer=optimizer),
                )
                seconds = time.perf_counter() - started
                record = result.state.history[-1]
                runs.append(
                    {
                        "optimizer": optimizer,
                        "lr": lr,
                        "steps": result.state.step,
                        "train_loss": round(record["loss"], 4),
                        "pairs_per_s": round(record["pairs_per_second"], 1),
                        "wall_s": round(seconds, 1),
                        **sts(load_model(result.bundle), eval_dir),
                    }
                )
                _common.log.info("%s", runs[-1])
    _common.emit(
        {
            "benchmark": "optimizer_compare",
            "machine": _common.machine_info(),
            "pairs": len(pairs),
            "dim": args.dim,
            "vocab_size": tokenizer.vocab_size,
            "spm": spm_info,
            "schedule": "paper: mega-batch 1 -> +1 every 150 steps (max 100), batch 128, clip 5",
            "untrained": initial,
            "runs": runs,
        }
    )


if __name__ == "__main__":
    main()
