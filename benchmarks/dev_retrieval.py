"""The dev suite's retrieval score against the test sets: does retrieval among a pool of
distractors order models as the test sets do, where retrieval among the held-back pairs alone
sits near its ceiling?

For each language of ``--languages``, the models of a ``benchmarks/multi_model.py`` root
(``--root``: each language's own model ``L/psp_model/model`` and the multilingual model) and
variants of the language's own model trained here on its training file (``--variants``:
``TrainConfig`` fields over the demo profile's, kept under ``ROOT/dev_retrieval/``) are scored
on:

* dev: the retrieval error (%) of the language's held-back pairs
  (``deduplicated_pairs/dev_pairs.parquet``), the mean of both directions, among the held-back
  translations alone (``pool_0``) and among them plus a pool of distractors (``pool_F``): the
  training pairs whose held-back key (:mod:`ops.pairs.held_back`) falls below F times the held-back
  rate, for each F of ``--pool-factors`` (nested: a smaller pool is part of a larger one);
* test: the language's STS 2017 sets (Pearson x 100) and, for zh, the pairs multi_model.py
  keeps out of every model's training (every ``--hold-every``-th pair of the bitext; retrieval
  error %, held-out translations only).

Then, for each dev measure and test set, the share of pairs of models it orders as the test
set does (a tie in either counts half). Prints one JSON object; logs go to stderr.

    .venv/bin/python benchmarks/dev_retrieval.py --root runs/bench_multi
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

#: the test sets of each language (files under the eval directory); zh: the held-out pairs
TESTS = {
    "ar": ("sts17/ar-en.tsv", "sts17/ar-ar.tsv"),
    "es": ("sts17/es-en.tsv", "sts17/es-es.tsv", "sts17/es-en-wmt.tsv"),
    "tr": ("sts17/tr-en.tsv",),
    "zh": ("held_out_zh",),
}
DEFAULT_VARIANTS = '{"e3": {"epochs": 3}, "d128": {"dim": 128}, "lr01": {"lr": 0.01}}'


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_multi")
    parser.add_argument("--languages", default="ar,es,tr,zh")
    parser.add_argument("--pool-factors", default="0,5,10,20,40")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="JSON: name -> fields")
    parser.add_argument("--hold-every", type=int, default=30)
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        "de of a quick root (its model and one variant, a pool from its first pairs, no test set)",
    )
    return parser.parse_args()


def training_pairs(folder: Path) -> tuple[Path, int]:
    """A language's training pair file (the text before any segmentation) and the pairs the
    held-back step read (what its rate was computed on)."""
    manifest = json.loads((folder / "deduplicated_pairs" / "manifest.json").read_text())
    outputs = manifest["outputs"]
    name = outputs.get("unsegmented", outputs["pairs"])
    held = manifest["record"].get("held_back", {})
    return folder / "deduplicated_pairs" / name, int(held.get("n_in", 0))


def pool_pairs(path: Path, n_in: int, factor: float) -> tuple[list[str], list[str]]:
    """The training pairs of ``path`` whose held-back key is below ``factor`` times the
    held-back rate of a corpus of ``n_in`` pairs."""
    import numpy as np

    from ops.pairs.corpus_caps import sample_keys
    from ops.pairs.held_back import DEFAULT_SEED, held_back_rate, pool_threshold
    from ops.pairs.pair_files import iter_pair_batches

    threshold = pool_threshold(held_back_rate(n_in), factor)
    english, other = [], []
    for batch in iter_pair_batches(path):
        chosen = np.flatnonzero(sample_keys(batch, DEFAULT_SEED) < threshold)
        english += batch.column("src").take(chosen).to_pylist()
        other += batch.column("tgt").take(chosen).to_pylist()
    return english, other


def dev_errors(model, held: tuple[list, list], pools: dict[str, tuple[list, list]]) -> dict:
    """``pool_F``: the retrieval error of the held-back pairs among them and pool F."""
    from psp_core.evaluation.dev_suite import both_ways_error

    english = model.embed(held[0], normalize=True)
    other = model.embed(held[1], normalize=True)
    scores = {}
    for name, (pool_english, pool_other) in pools.items():
        distractors = (
            model.embed(pool_english, normalize=True) if pool_english else None,
            model.embed(pool_other, normalize=True) if pool_other else None,
        )
        scores[name] = round(both_ways_error(english, other, *distractors), 3)
    return scores


def test_scores(model, lang: str, eval_dir: Path, held_out: tuple[list, list] | None) -> dict:
    """The language's test sets: STS Pearson x 100 (higher is better) and the held-out zh
    pairs' retrieval error (lower is better)."""
    from psp_core.evaluation.dev_suite import both_ways_error
    from psp_core.evaluation.sts import StsEvaluator

    scores = {}
    for name in TESTS.get(lang, ()):
        if name == "held_out_zh" and held_out is not None:
            english = model.embed(held_out[0], normalize=True)
            other = model.embed(held_out[1], normalize=True)
            scores["held_out_zh_error"] = round(both_ways_error(english, other), 3)
        elif (eval_dir / name).is_file():
            scores[Path(name).stem] = round(StsEvaluator(eval_dir / name)(model), 3)
    return scores


def train_variant(
    root: Path, lang: str, name: str, fields: dict, quick: bool
) -> tuple[Path, float]:
    """The language's own model trained again with ``fields`` over the demo profile's settings
    (made once; returns the bundle and the seconds it took, 0 when it was there)."""
    import os

    from assets.settings.profiles import PROFILE_SETTINGS, Profile
    from psp_core.training.config import TrainConfig
    from psp_core.training.trainer import train

    bundle = root / "dev_retrieval" / lang / name
    if bundle.is_dir():
        return bundle, 0.0
    _, spec = _common.dev_suite_for(root, lang)
    base = _common.QUICK_TRAINING if quick else PROFILE_SETTINGS[Profile.demo]["psp_model"]
    work = bundle.with_name(f"{name}.tmp-{os.getpid()}")
    started = time.perf_counter()
    train(
        root / lang / "training_data" / "train.h5",
        root / lang / "sentencepiece_model" / "sentencepiece.model",
        work,
        TrainConfig(**{**base, **fields}),
        resume=False,
        pretokenizer=spec.pretokenizer,
    )
    os.replace(work, bundle)
    return bundle, round(time.perf_counter() - started, 1)


def agreement(rows: dict[str, dict], dev: str, test: str, lower_test_is_better: bool) -> float:
    """The share of model pairs that ``dev`` (an error: lower is better) orders as ``test``."""
    total, agree = 0, 0.0
    for a, b in itertools.combinations(sorted(rows), 2):
        dev_a, dev_b = rows[a]["dev"][dev], rows[b]["dev"][dev]
        test_a, test_b = rows[a]["test"][test], rows[b]["test"][test]
        dev_order = (dev_a < dev_b) - (dev_a > dev_b)  # +1: a better on dev
        test_order = (test_a > test_b) - (test_a < test_b)
        if lower_test_is_better:
            test_order = -test_order
        total += 1
        agree += 0.5 if dev_order == 0 or test_order == 0 else float(dev_order == test_order)
    return round(agree / total, 3) if total else float("nan")


def quick_setup(args: argparse.Namespace) -> None:
    """A quick root (de), with its training pairs written as the pipeline lays them out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    args.root = _common.quick_root(args.data_dir, args.results_dir)
    args.languages, args.pool_factors = "de", "0,5"
    args.variants = '{"e2": {"epochs": 2}}'
    folder = args.root / "de" / "deduplicated_pairs"
    if not (folder / "manifest.json").is_file():
        english, other = _common.read_bitext(args.data_dir, "de", _common.QUICK_PAIRS)
        pq.write_table(pa.table({"src": english, "tgt": other}), folder / "pairs.parquet")
        record = {"held_back": {"n_in": len(english)}}
        manifest = {"outputs": {"pairs": "pairs.parquet"}, "record": record}
        (folder / "manifest.json").write_text(json.dumps(manifest))


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    if args.quick:
        quick_setup(args)
    import pyarrow.parquet as pq

    from psp_core import load_model
    from psp_core.evaluation.dev_suite import is_lower_better as lower_is_better

    eval_dir = _common.eval_dir_for(args)
    factors = [float(f) for f in args.pool_factors.split(",")]
    variants = json.loads(args.variants)
    out: dict = {"root": str(args.root), "pool_factors": factors, "languages": {}}
    for lang in args.languages.split(","):
        folder = args.root / lang
        held = pq.read_table(folder / "deduplicated_pairs" / "dev_pairs.parquet")
        held = (held["src"].to_pylist(), held["tgt"].to_pylist())
        train_file, n_in = training_pairs(folder)
        pools = {}
        for factor in factors:
            pools[f"pool_{factor:g}"] = pool_pairs(train_file, n_in, factor) if factor else ([], [])
        held_out = None
        if lang == "zh":
            english, chinese = _common.read_bitext(args.data_dir, "zh")
            every = args.hold_every
            held_out = (english[every - 1 :: every], chinese[every - 1 :: every])
        models = {"own": folder / "psp_model" / "model"}
        multi = args.root / "multi" / "psp_model" / "model"
        if multi.is_dir() and not args.quick:
            models["multi"] = multi
        seconds = {}
        for name, fields in variants.items():
            models[name], seconds[name] = train_variant(args.root, lang, name, fields, args.quick)
        rows = {}
        for name, bundle in models.items():
            model = load_model(bundle)
            rows[name] = {
                "dev": dev_errors(model, held, pools),
                "test": test_scores(model, lang, eval_dir, held_out),
            }
            print(f"{lang} {name}: {rows[name]}", file=sys.stderr, flush=True)
        tests = sorted({t for row in rows.values() for t in row["test"]})
        out["languages"][lang] = {
            "held_back_pairs": len(held[0]),
            "pool_pairs": {name: len(pool[0]) for name, pool in pools.items()},
            "models": rows,
            "variant_training_seconds": seconds,
            "agreement": {
                test: {dev: agreement(rows, dev, test, lower_is_better(test)) for dev in pools}
                for test in tests
            },
        }
    _common.emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
