"""Retrieval with quantized embeddings (``encode(precision=...)``) against float32, on the dev
suite's held-back pairs.

For each language of ``--languages``, the model of a storage root (``--root``, a ``make run`` or
``benchmarks/unknown_text.py`` root: ``L/psp_model/model``) embeds the language's held-back
pairs and its pool of distractors (``deduplicated_pairs/dev_pairs.parquet`` and
``dev_pool.parquet``: sentences no training saw), unit length. Each held-back sentence is a
query among all the other side's sentences, both ways. For each precision:

* ``error``: the share (%) of queries whose nearest neighbour is not their translation (the dev
  suite's ``held_back_X_error`` for float32);
* ``top1_agreement``: the share (%) whose nearest neighbour is float32's;
* ``recall_at_10``: the share (%) whose float32 nearest neighbour is among the 10 nearest (what a
  search that rescores 10 candidates in float32 keeps).

int8: dot products of the codes, ranges from the pool (``quantization_ranges``); binary: Hamming
distance of the sign bits. Bytes per vector beside. Prints one JSON object.

    .venv/bin/python benchmarks/quantized_recall.py --root runs/unknown_text/unknown --languages de,zh,ar
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

PRECISIONS = ("float32", "int8", "binary")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "psp_data")
    parser.add_argument("--languages", default="de")
    _common.add_data_arguments(parser)
    _common.add_quick_argument(parser, "the quick root's de model and its 200 held-back pairs")
    return parser.parse_args()


def similarities(queries, corpus, precision: str, ranges):
    """``[len(queries), len(corpus)]``: larger is nearer, at ``precision``."""
    import numpy as np

    from psp_core import quantize_embeddings

    if precision == "float32":
        return queries @ corpus.T
    if precision == "int8":
        q = quantize_embeddings(queries, "int8", ranges=ranges).astype(np.int32)
        c = quantize_embeddings(corpus, "int8", ranges=ranges).astype(np.int32)
        return q @ c.T
    q = np.unpackbits(quantize_embeddings(queries, "ubinary"), axis=1).astype(np.int32)
    c = np.unpackbits(quantize_embeddings(corpus, "ubinary"), axis=1).astype(np.int32)
    # agreements minus disagreements of the bits: minus twice the Hamming distance, plus a constant
    return (2 * q - 1) @ (2 * c - 1).T


def one_way(queries, corpus, ranges) -> dict:
    """Each precision's counts for ``queries[i]`` whose translation is ``corpus[i]``."""
    import numpy as np

    n = len(queries)
    exact = similarities(queries, corpus, "float32", ranges)
    nearest = exact.argmax(axis=1)
    counts = {}
    for precision in PRECISIONS:
        scores = (
            exact if precision == "float32" else similarities(queries, corpus, precision, ranges)
        )
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        counts[precision] = {
            "wrong": int((top[:, 0] != np.arange(n)).sum()),
            "agree": int((top[:, 0] == nearest).sum()),
            "in_10": int((top == nearest[:, None]).any(axis=1).sum()),
        }
    return counts


def language(root: Path, code: str) -> dict:
    from psp_core import load_model, quantization_ranges

    suite, _ = _common.dev_suite_for(root, code)
    english, other = suite.pairs[code]
    pool_english, pool_other = suite.pools.get(code, ([], []))
    model = load_model(root / code / "psp_model" / "model")
    e = model.embed(english + pool_english, normalize=True)
    o = model.embed(other + pool_other, normalize=True)
    n = len(english)
    ranges = quantization_ranges(e[n:] if len(e) > n + 1 else e)
    ranges_other = quantization_ranges(o[n:] if len(o) > n + 1 else o)
    a, b = one_way(e[:n], o, ranges_other), one_way(o[:n], e, ranges)
    out: dict = {"queries": 2 * n, "corpus": len(o), "dim": model.dim}
    for precision in PRECISIONS:
        both = {k: a[precision][k] + b[precision][k] for k in a[precision]}
        out[precision] = {
            "bytes": model.dim * 4
            if precision == "float32"
            else model.dim // (1 if precision == "int8" else 8),
            "error": round(100 * both["wrong"] / (2 * n), 2),
            "top1_agreement": round(100 * both["agree"] / (2 * n), 2),
            "recall_at_10": round(100 * both["in_10"] / (2 * n), 2),
        }
    return out


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    if args.quick:
        args.root, args.languages = _common.quick_root(args.data_dir, args.results_dir), "de"
    out = {"machine": _common.machine_info(), "languages": {}}
    for code in args.languages.split(","):
        out["languages"][code] = language(args.root.resolve(), code)
        print(code, out["languages"][code], file=sys.stderr, flush=True)
    _common.emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
