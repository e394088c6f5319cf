"""What verifying a model bundle costs: save and load times of a [~50k, 1024] float32 bundle.

Measures, repeating each and reporting best and median seconds:

* ``save_s``: ``save_bundle`` (safetensors, then the size and checksum of each file read back);
* ``load_s.verified``: ``load_bundle`` of that bundle (checksums, spm checks, safetensors,
  shape, finiteness);
* ``load_s.without_checksums``: the same bundle with ``files`` removed from config.json, as
  bundles saved before checksums load (everything but the checksums);
* ``load_s.safetensors_only``: the bare ``safetensors.numpy.load_file`` of the table;
* ``hash_gb_s``: throughput of xxh3_128 (the bundle's checksum) and sha256 (hashlib) on the
  table in memory, and of the bundle's block-wise file checksum on the written file;
* ``finite_check_s``: the finiteness check of the table (``min``/``max``) beside
  ``np.isfinite(table).all()``;
* ``first_tokenizer_in_a_process_s``: a fresh process's first ``Tokenizer`` with its word
  cache, as ``psp embed`` and a server's model load make it (imports not counted);
* ``tokenizer_s``: the same again in one process: sentencepiece's load of the model, the
  ``Tokenizer`` with its word cache, and the reading of the model behind the word cache's
  check, without the pieces (as it is done) and with every piece decoded.

Files are read from the page cache (just written): the figures are the CPU cost of
verification, not disk speed. The sentencepiece model is the benchmarks' cached 50k model
(trained on first use from ``../shared/data``); the table is random. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import numpy as np
import xxhash

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=64)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    _common.add_quick_argument(parser, "the quick sentencepiece model, dim 64, 2 repeats")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab_size, args.dim, args.repeats = _common.QUICK_VOCAB_SIZE, 64, 2
    return args


def summary(times: list[float]) -> dict:
    return {
        "best": round(min(times), 6),
        "median": round(statistics.median(times), 6),
        "times": [round(t, 6) for t in times],
    }


def timed(function, repeats: int) -> dict:
    return interleaved({"": function}, repeats)[""]


def interleaved(functions: dict, repeats: int) -> dict:
    """Time each function once per round, ``repeats`` rounds, so a slow phase of a shared
    machine falls on all of them."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            started = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - started)
    return {name: summary(values) for name, values in times.items()}


def throughput(seconds: dict, size: int) -> float | None:
    """GB/s of the best time (None when it is below the clock's resolution)."""
    return round(size / seconds["best"] / 1e9, 2) if seconds["best"] > 0 else None


#: a fresh process's first ``Tokenizer`` (with its word cache) of the model at argv[1]: seconds
FIRST_TOKENIZER = r"""
import sys, time
from psp_core.tokenization.tokenizer import Tokenizer
proto = open(sys.argv[1], "rb").read()
started = time.perf_counter()
Tokenizer(proto, word_cache_size=100_000)
print(time.perf_counter() - started)
"""


def first_tokenizer_seconds(spm_path: Path, repeats: int) -> dict:
    """The first ``Tokenizer`` of a process, as ``psp embed`` or a server's model load makes
    it: ``repeats`` fresh processes, imports not counted."""
    times = []
    for _ in range(repeats):
        child = subprocess.run(
            [sys.executable, "-c", FIRST_TOKENIZER, str(spm_path)],
            capture_output=True, text=True, check=True, cwd=_common.REPO_ROOT,
        )  # fmt: skip
        times.append(float(child.stdout.strip().splitlines()[-1]))
    return summary(times)


def tokenizer_seconds(proto: bytes, repeats: int) -> dict:
    """What making a model's tokenizer costs again in one process: sentencepiece's own load,
    the whole ``Tokenizer`` with its word cache, and the model reading behind the word cache's
    check (``word_independent``): without the pieces, as it does, and with every piece
    decoded."""
    import sentencepiece as spm

    from psp_core.tokenization.sentencepiece_spec import SentencePieceSpec
    from psp_core.tokenization.tokenizer import Tokenizer

    return interleaved(
        {
            "sentencepiece load": lambda: spm.SentencePieceProcessor(model_proto=proto),
            "Tokenizer with its word cache": lambda: Tokenizer(proto, word_cache_size=100_000),
            "spec without the pieces (the check)": lambda: SentencePieceSpec.parse(
                proto, pieces=False
            ),
            "spec with every piece": lambda: SentencePieceSpec.parse(proto),
        },
        repeats,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return 0

    from safetensors.numpy import load_file

    from psp_core.models.bundle import (
        CONFIG_FILE,
        EMBEDDINGS_FILE,
        BundleConfig,
        file_record,
        load_bundle,
        require_finite,
        save_bundle,
    )

    machine = _common.machine_info()
    spm_path, spm_info = _common.spm_model(
        args.data_dir,
        args.results_dir,
        vocab_size=args.vocab_size,
        max_pairs=_common.QUICK_PAIRS if args.quick else None,
    )
    proto = spm_path.read_bytes()
    vocab = spm_info["vocab_size"]
    table = np.random.default_rng(args.seed).standard_normal((vocab, args.dim), dtype=np.float32)
    config = BundleConfig(dim=args.dim, vocab_size=vocab, spm_sha256=spm_info["sha256"])
    log.info("table %d x %d float32 (%.0f MB)", vocab, args.dim, table.nbytes / 1e6)

    args.results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.results_dir, prefix="bundle-verify-") as work:
        bundle = Path(work) / "bundle"
        save = timed(lambda: save_bundle(bundle, table, proto, config), args.repeats)
        old = Path(work) / "old"
        save_bundle(old, table, proto, config)
        data = json.loads((old / CONFIG_FILE).read_text())
        del data["files"]
        (old / CONFIG_FILE).write_text(json.dumps(data))
        logging.getLogger("psp_core.models.bundle").setLevel(logging.WARNING)  # old bundle's notice
        load = interleaved(
            {
                "verified": lambda: load_bundle(bundle),
                "without_checksums": lambda: load_bundle(old),
                "safetensors_only": lambda: load_file(str(bundle / EMBEDDINGS_FILE)),
            },
            args.repeats,
        )
        file_hash = timed(lambda: file_record(bundle / EMBEDDINGS_FILE), args.repeats)
        file_size = (bundle / EMBEDDINGS_FILE).stat().st_size

    first_tokenizer = first_tokenizer_seconds(spm_path, args.repeats)
    tokenizer = tokenizer_seconds(proto, args.repeats)
    view = memoryview(table).cast("B")
    xxh3 = timed(lambda: xxhash.xxh3_128(view).hexdigest(), args.repeats)
    sha256 = timed(lambda: hashlib.sha256(view).hexdigest(), args.repeats)
    finite = interleaved(
        {
            "min_max (used)": lambda: require_finite(table, "", ""),
            "np.isfinite(table).all()": lambda: np.isfinite(table).all(),
        },
        args.repeats,
    )
    verified, unverified = load["verified"]["median"], load["without_checksums"]["median"]
    _common.emit(
        {
            "benchmark": "bundle_verify",
            "table": {"rows": vocab, "dim": args.dim, "megabytes": round(table.nbytes / 1e6, 1)},
            "save_s": save,
            "load_s": load,
            "checksum_cost_of_load_s (medians)": round(verified - unverified, 4),
            "hash_gb_s": {
                "xxh3_128 in memory": throughput(xxh3, table.nbytes),
                "sha256 in memory": throughput(sha256, table.nbytes),
                "xxh3_128 of the file (block-wise, page cache)": throughput(file_hash, file_size),
            },
            "hash_s": {"xxh3_128": xxh3, "sha256": sha256, "xxh3_128 file": file_hash},
            "finite_check_s": finite,
            "first_tokenizer_in_a_process_s": first_tokenizer,
            "tokenizer_s": tokenizer,
            "spm": spm_info,
            "repeats": args.repeats,
            "machine": machine,
            "loadavg_at_end": _common.loadavg(),
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
