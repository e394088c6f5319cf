"""A language's model started from the multilingual one, against the language's own model and
the multilingual model, on the dev suite.

For each language of ``--languages``, in a ``benchmarks/multi_model.py`` root (``--root``): the
language's training pairs (``deduplicated_pairs``) are shuffled, encoded with the multilingual
model's vocabulary and trained at the demo profile's settings for a language's model, starting
from the multilingual model's weights (``train(init_from=...)``, what ``psp train --init-from``
does). The three models are scored on the language's dev suite: STS 2017 en-en, STS-B dev and
the held-back pairs' retrieval error among them and the pool of distractors
(:mod:`ops.pairs.held_back`, computed from the training pairs as the pipeline's ``dev_pool``). Test
sets are not read. Prints one JSON object; logs go to stderr.

    .venv/bin/python benchmarks/init_from_multi.py --root runs/bench_multi --languages de,tr,ar,zh
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import dev_retrieval  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_multi")
    parser.add_argument("--languages", default="de,tr,ar,zh")
    parser.add_argument("--set", default="{}", help="TrainConfig fields over the demo's")
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser, "de of a quick root, its own model standing in for the multilingual one"
    )
    return parser.parse_args()


def write_pool(folder: Path, lang_folder: Path) -> Path:
    """The language's dev pool (the pipeline's ``dev_pool``, or computed as it is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ops.pairs.held_back import POOL_FACTOR

    made = lang_folder / "deduplicated_pairs" / "dev_pool.parquet"
    if made.is_file():
        return made
    path = folder / "dev_pool.parquet"
    if not path.is_file():
        pairs, n_in = dev_retrieval.training_pairs(lang_folder)
        english, other = dev_retrieval.pool_pairs(pairs, n_in, POOL_FACTOR)
        pq.write_table(pa.table({"src": english, "tgt": other}), path)
    return path


def continue_multi(
    folder: Path, lang_folder: Path, multi: Path, lang: str, fields: dict, quick: bool
) -> tuple:
    """The language's pairs, encoded with the multilingual vocabulary, trained from the
    multilingual weights (made once); returns the bundle and the training seconds."""
    import pyarrow.parquet as pq

    from assets.settings.profiles import PROFILE_SETTINGS, Profile
    from ops.training_data.packing import pack_pairs
    from psp_core import load_model
    from psp_core.training.config import TrainConfig
    from psp_core.training.trainer import train

    bundle = folder / "from_multi"
    if bundle.is_dir():
        return bundle, None
    tokenizer = load_model(multi).tokenizer
    pairs_file, _ = dev_retrieval.training_pairs(lang_folder)
    table = pq.read_table(pairs_file, columns=["src", "tgt"])
    pairs = list(zip(table["src"].to_pylist(), table["tgt"].to_pylist(), strict=True))
    random.Random(1).shuffle(pairs)
    data = folder / "train.h5"
    if not data.is_file():
        pack_pairs(pairs, tokenizer, folder / "train.h5.tmp", lang=lang)
        os.replace(folder / "train.h5.tmp", data)
    base = _common.QUICK_TRAINING if quick else PROFILE_SETTINGS[Profile.demo]["psp_model"]
    work = folder / f"from_multi.tmp-{os.getpid()}"
    started = time.perf_counter()
    train(
        data,
        multi / "sentencepiece.model",
        work,
        TrainConfig(**{**base, **fields}),
        resume=False,
        init_from=multi,
        pretokenizer=tokenizer.pretokenizer_name,
    )
    os.replace(work, bundle)
    return bundle, round(time.perf_counter() - started, 1)


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    multi_code = "multi"
    if args.quick:
        dev_retrieval.quick_setup(args)  # (a quick root; its own model stands in for multi)
        args.languages, multi_code = "de", "de"
    from psp_core import load_model
    from psp_core.evaluation.dev_suite import DevSuite, dev_mean

    eval_dir = _common.eval_dir_for(args)
    multi = args.root / multi_code / "psp_model" / "model"
    out: dict = {"root": str(args.root), "languages": {}}
    for lang in args.languages.split(","):
        lang_folder = args.root / lang
        folder = args.root / "init_from_multi" / lang
        folder.mkdir(parents=True, exist_ok=True)
        held = lang_folder / "deduplicated_pairs" / "dev_pairs.parquet"
        suite = DevSuite(eval_dir, {lang: held}, {lang: write_pool(folder, lang_folder)})
        bundle, seconds = continue_multi(
            folder, lang_folder, multi, lang, json.loads(args.set), args.quick
        )
        models = {"own": lang_folder / "psp_model" / "model", "multi": multi, "from_multi": bundle}
        rows = {}
        for name, path in models.items():
            scores = suite.scores(load_model(path))
            rows[name] = scores | {"dev_mean": dev_mean(scores)}
            print(f"{lang} {name}: {rows[name]}", file=sys.stderr, flush=True)
        out["languages"][lang] = {"models": rows, "from_multi_training_seconds": seconds}
    _common.emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
