"""Train and evaluate a P-SP model on line-aligned bitext with ``psp_core`` and ``psp``.

This is the project's main command until the Dagster job lands: it turns a directory of
line-aligned files (by default the real en-de bitext in ``../shared/data/bitext/en-de``) into a
model bundle and prints its STS correlations next to the untrained model's.

    python scripts/quickstart.py [--bitext-dir DIR] [--lang de] [--work-dir runs/quickstart]
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

from ops.packing import pack_pairs
from ops.sentencepiece_model import train_sentencepiece
from ops.text_io import read_aligned
from psp_core import TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator, read_sts_file

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
log = logging.getLogger("quickstart")


def sts_table(model, eval_dir: Path) -> dict[str, float]:
    table = {}
    en_en = eval_dir / "sts17" / "en-en.tsv"
    if en_en.is_file():
        table["STS17 en-en"] = StsEvaluator(en_en)(model)
    for year in ("2012", "2013", "2014"):
        files = sorted(glob.glob(str(eval_dir / "sts" / year / "*.tsv")))
        if files:
            table[f"STS{year}"] = float(np.mean([StsEvaluator(f)(model) for f in files]))
    return {name: round(value, 1) for name, value in table.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", default="de")
    parser.add_argument("--bitext-dir", type=Path, default=None)
    parser.add_argument("--eval-dir", type=Path, default=SHARED / "eval")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "runs" / "quickstart")
    parser.add_argument("--vocab-size", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    bitext = args.bitext_dir or SHARED / "bitext" / f"en-{args.lang}"
    english = next(iter(sorted(bitext.glob("*.en.gz")) + sorted(bitext.glob("*.en"))), None)
    if english is None:
        print(f"no *.en or *.en.gz file in {bitext}; pass --bitext-dir", file=sys.stderr)
        return 2
    other = english.with_name(english.name.replace(".en", f".{args.lang}", 1))
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)

    spm_path = work / "sentencepiece.model"
    if not spm_path.exists():
        train_sentencepiece(
            (s.lower() for pair in read_aligned(english, other) for s in pair),
            spm_path,
            vocab_size=args.vocab_size,
        )
    data_path = work / "train.h5"
    if not data_path.exists():
        from psp_core import Tokenizer

        pairs = [p for p in read_aligned(english, other) if p[0].strip() and p[1].strip()]
        random.Random(1).shuffle(pairs)  # the shared bitext is small; ops/ shuffles out of core
        count = pack_pairs(pairs, Tokenizer.from_file(spm_path), data_path, lang=args.lang)
        log.info("packed %d pairs into %s", count, data_path)

    dev = args.eval_dir / "sts17" / "en-en.tsv"
    base = dict(dim=args.dim, lr=args.lr, max_megabatch=20, anneal_every=20, log_every=200)
    untrained = train(data_path, spm_path, work / "untrained", TrainConfig(**base, max_steps=0))
    command = [
        sys.executable, "-m", "psp_core.cli", "train", "--data", str(data_path),
        "--spm", str(spm_path), "--output", str(work / "model"), "--epochs", str(args.epochs),
        "--dim", str(args.dim), "--lr", str(args.lr), "--max-megabatch", "20",
        "--anneal-every", "20",
    ]  # fmt: skip
    if dev.is_file():
        command += ["--dev-sts", str(dev)]
    subprocess.run(command, check=True)

    trained = load_model(work / "model")
    report = {
        "model": str(work / "model"),
        "untrained": sts_table(load_model(untrained.bundle), args.eval_dir),
        "trained": sts_table(trained, args.eval_dir),
    }
    if dev.is_file():
        pairs = read_sts_file(dev)
        report["example"] = {
            "pair": [pairs.first[0], pairs.second[0]],
            "gold": float(pairs.gold[0]),
            "cosine": round(float(trained.score([(pairs.first[0], pairs.second[0])])[0]), 3),
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
