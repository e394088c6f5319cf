"""A float16 embedding table against float32: embedding speed on 1 thread and the STS change.

A model is trained on the shared en-de bitext (the 50k sentencepiece model, dim 1024, one
epoch at the demo profile's lr 0.05), then loaded both ways (``load_model(dtype=...)``) and
measured on the sentences of the shared STS files: ``embed`` with tokenization, ``embed_ids``
on pre-tokenized batches of 64 (the averaging alone), medians of ``--repeats``; and STS
2012-2014 (mean of the years' means), STS 2017 en-en and STS-B dev (Pearson x 100) with each.

    python benchmarks/float16_compare.py [--repeats 5]

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import _common
import numpy as np
import torch

from ops.training_data.packing import pack_pairs
from psp_core import Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator

STS_YEARS = ("2012", "2013", "2014")


def sts(model, eval_dir: Path) -> dict:
    years = [
        np.mean([StsEvaluator(f)(model) for f in sorted((eval_dir / "sts" / y).glob("*.tsv"))])
        for y in STS_YEARS
    ]
    stsb = sorted((eval_dir / "stsb").glob("*dev*"))
    return {
        "sts12_14": round(float(np.mean(years)), 3),
        "sts17_en_en": round(StsEvaluator(eval_dir / "sts17" / "en-en.tsv")(model), 3),
        "stsb_dev": round(StsEvaluator(stsb[0])(model), 3) if stsb else None,
    }


def speed(model, sentences: list[str], repeats: int) -> dict:
    tokens = model.tokenizer.encode(sorted(sentences, key=len))

    def averaging() -> None:
        for start in range(0, len(sentences), 64):
            stop = min(start + 64, len(sentences))
            low, high = tokens.offsets[start], tokens.offsets[stop]
            model.embed_ids(tokens.ids[low:high], tokens.offsets[start : stop + 1] - low)

    result = {}
    for name, function in (
        ("with_tokenization", lambda: model.embed(sentences)),
        ("without_tokenization", averaging),
    ):
        function()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            function()
            times.append(time.perf_counter() - started)
        result[name] = round(len(sentences) / statistics.median(times))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all)")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--sentences", type=int, default=0, help="STS sentences timed; 0: all")
    _common.add_quick_argument(
        parser,
        f"the quick sentencepiece model, {_common.QUICK_PAIRS:,} pairs, dim 32, 1,000 sentences, "
        "1 repeat",
    )
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.dim, args.sentences, args.repeats = _common.QUICK_PAIRS, 32, 1000, 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    eval_dir = _common.eval_dir_for(args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    spm_path, _ = (
        _common.quick_spm_model(args.data_dir, args.results_dir)
        if args.quick
        else _common.spm_model(args.data_dir, args.results_dir)
    )
    english, german = _common.read_bitext(args.data_dir, "de")
    pairs = [p for p in zip(english, german, strict=True) if p[0].strip() and p[1].strip()]
    random.Random(0).shuffle(pairs)
    pairs = pairs[: args.pairs]
    sentences, _ = _common.read_sts_sentences(args.data_dir)
    sentences = sentences[: args.sentences or None]
    results: dict = {"benchmark": "float16_compare", "machine": _common.machine_info()}
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "train.h5"
        pack_pairs(pairs, Tokenizer.from_file(spm_path), data, lang="de")
        config = TrainConfig(dim=args.dim, lr=0.05, epochs=1, log_every=0, checkpoint_every=0)
        bundle = train(data, spm_path, Path(work) / "model", config).bundle
        torch.set_num_threads(1)
        for dtype in ("float32", "float16"):
            model = load_model(bundle, dtype=dtype)
            results[dtype] = {
                "table_mib": round(model.weight.numel() * model.weight.element_size() / 2**20),
                "sentences_per_s_1_thread": speed(model, sentences, args.repeats),
                "sts": sts(model, eval_dir),
            }
            _common.log.info("%s: %s", dtype, results[dtype])
    results["sentences"] = len(sentences)
    _common.emit(results)


if __name__ == "__main__":
    main()
