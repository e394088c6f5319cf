"""Which ``batch_size`` should ``embed`` default to: sentences/s of ``model.embed`` on 1 thread
for each batch size, with tokenization (warm word cache, as ``load_model`` builds the model),
on the 20,216 STS sentences with the 50k model and a random float32 table ``[50000, 1024]``.

The sizes take turns for ``--rounds`` rounds (every other round in reverse order, so that a slow
phase of this shared machine falls on every size alike), ``--repeats`` timings each per round;
the median and best over all timings of a size are reported. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common
import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=64)
    parser.add_argument("--sizes", default="32,64,128,256,512,1024")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=0, help="STS sentences used; 0: all")
    _common.add_quick_argument(
        parser, "the quick sentencepiece model, dim 64, sizes 32 and 256, 1,000 sentences, once"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab_size, args.dim, args.sizes = _common.QUICK_VOCAB_SIZE, 64, "32,256"
        args.rounds, args.repeats, args.sentences = 1, 1, 1000
    _common.setup_logging(args.verbose)
    for parts in (("eval", "sts"), ("eval", "sts17"), ("bitext", "en-de")):
        if _common.require_data(args.data_dir, *parts) is None:
            return 0
    import torch

    from psp_core import BundleConfig, PSPModel, Tokenizer

    torch.set_num_threads(1)
    sentences, _ = _common.read_sts_sentences(args.data_dir)
    sentences = sentences[: args.sentences or None]
    spm_path, spm_info = _common.spm_model(
        args.data_dir,
        args.results_dir,
        vocab_size=args.vocab_size,
        max_pairs=_common.QUICK_PAIRS if args.quick else None,
    )
    tokenizer = Tokenizer(spm_path.read_bytes(), num_threads=1, word_cache_size=500_000)
    vocab = tokenizer.vocab_size
    table = np.random.default_rng(0).standard_normal((vocab, args.dim), dtype=np.float32)
    model = PSPModel(
        tokenizer, table, BundleConfig(dim=args.dim, vocab_size=vocab, spm_sha256=tokenizer.sha256)
    )
    sizes = [int(size) for size in args.sizes.split(",")]
    for _ in range(2):  # the cache caches a word on its second sighting
        model.embed(sentences)
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for round_number in range(args.rounds):
        for size in sizes if round_number % 2 == 0 else sizes[::-1]:
            for _ in range(args.repeats):
                started = time.perf_counter()
                model.embed(sentences, batch_size=size)
                times[size].append(time.perf_counter() - started)
    n = len(sentences)
    result = {
        "benchmark": "embed_batch_size",
        "machine": _common.machine_info(),
        "parameters": {
            "sentences": n,
            "dim": args.dim,
            "threads": 1,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "spm": spm_info,
        },  # fmt: skip
        "sentences_per_s": {
            str(size): {
                "median": round(n / statistics.median(values)),
                "best": round(n / min(values)),
                "timings": len(values),
            }
            for size, values in times.items()
        },
        "loadavg_at_end": _common.loadavg(),
    }
    _common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
