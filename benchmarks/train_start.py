"""What starting a training process costs: fresh ``python`` processes that each train a few
mini-batches with ``psp_core.train``, timed from the parent (the interpreter's start included).

Variants, one process of each per round, ``--rounds`` rounds taking turns:

* ``sparse``: the default optimizer (``LazyAdam``), as ``psp train`` and the Dagster training
  step run it;
* ``sparse_after_dynamo``: the same after ``import torch._dynamo``, which a
  ``torch.optim.Optimizer`` imports on first use: what the sparse optimizer cost while it
  derived from that class (the baseline);
* ``dense``: ``torch.optim.Adam`` (``--optimizer dense``), which still imports it.

Each process reports its own clock: ``import_s`` (``psp_core.train`` and torch imported),
``first_step_s`` (its first mini-batch done) and ``cpu_s`` (user + system); the parent
measures ``wall_s``, from ``exec`` to exit. Medians over the rounds. The sentencepiece model
and training file are the en-de ones of train_speed.py (50k vocabulary, dim 1024 by default),
cached under benchmarks/results/. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import train_speed

log = _common.log

#: the child: imports, trains ``steps`` mini-batches, prints its clock as JSON
CHILD = r"""
import json, resource, sys, time
started = time.monotonic()
variant, data, spm, out, dim, batch, steps = sys.argv[1:8]
if variant == "sparse_after_dynamo":
    import torch._dynamo
from psp_core import TrainConfig, train
imported = time.monotonic()
first = []
config = TrainConfig(dim=int(dim), batch_size=int(batch), max_megabatch=1, anneal_every=0,
                     max_steps=int(steps), checkpoint_every=0, log_every=0,
                     optimizer="dense" if variant == "dense" else "sparse")
train(data, spm, out, config, on_step=lambda *_: first or first.append(time.monotonic()))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import_s": imported - started, "first_step_s": first[0] - started,
                  "cpu_s": usage.ru_utime + usage.ru_stime}))
"""

VARIANTS = ("sparse", "sparse_after_dynamo", "dense")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=128)
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs in the training file")
    parser.add_argument("--steps", type=int, default=3, help="mini-batches each process trains")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    _common.add_quick_argument(
        parser, "the quick sentencepiece model and bitext slice, dim 32, one round of two variants"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.quick:
        args.vocab_size, args.dim, args.pairs = _common.QUICK_VOCAB_SIZE, _common.QUICK_DIM, 500
        args.rounds, args.steps, args.variants = 1, 2, ["sparse", "sparse_after_dynamo"]
    return args


def run_child(variant: str, data: Path, spm: Path, work: Path, args) -> dict:
    out = work / f"{variant}-{time.monotonic_ns()}"
    argv = [sys.executable, "-c", CHILD, variant, str(data), str(spm), str(out)]
    argv += [str(args.dim), str(args.batch_size), str(args.steps)]
    started = time.monotonic()
    child = subprocess.run(argv, capture_output=True, text=True, cwd=_common.REPO_ROOT)
    wall = time.monotonic() - started
    if child.returncode != 0:
        raise RuntimeError(f"{variant}: exit {child.returncode}: {child.stderr[-2000:]}")
    return {**json.loads(child.stdout.strip().splitlines()[-1]), "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        _common.emit({"skipped": f"no en-de bitext under {args.data_dir}"})
        return
    quick_pairs = _common.QUICK_PAIRS if args.quick else None
    spm_file, spm_info = _common.spm_model(
        args.data_dir, args.results_dir, vocab_size=args.vocab_size, max_pairs=quick_pairs
    )
    data, data_info = train_speed.training_file(
        args.data_dir, args.results_dir, spm_file, spm_info, args.pairs, args.seed, 1, {},
        bitext_pairs=quick_pairs,
    )  # fmt: skip
    runs: dict[str, list[dict]] = {variant: [] for variant in args.variants}
    with tempfile.TemporaryDirectory(prefix="train-start-") as work:
        for round_number in range(args.rounds):
            for variant in args.variants:
                runs[variant].append(run_child(variant, data, spm_file, Path(work), args))
            log.info("round %d of %d done", round_number + 1, args.rounds)
    medians = {
        variant: {
            key: round(statistics.median(run[key] for run in results), 3)
            for key in ("wall_s", "cpu_s", "import_s", "first_step_s")
        }
        for variant, results in runs.items()
    }
    result = {
        "benchmark": "train_start",
        "machine": _common.machine_info(),
        "settings": {
            "vocab_size": spm_info.get("vocab_size", args.vocab_size),
            "dim": args.dim,
            "batch_size": args.batch_size,
            "steps": args.steps,
            "rounds": args.rounds,
            "pairs": args.pairs,
            "quick": args.quick,
        },
        "training_file": data_info,
        "median": medians,
        "runs": runs,
    }
    if "sparse" in medians and "sparse_after_dynamo" in medians:
        result["dynamo_import_saved_s"] = {
            key: round(medians["sparse_after_dynamo"][key] - medians["sparse"][key], 3)
            for key in ("wall_s", "cpu_s")
        }
    _common.emit(result)


if __name__ == "__main__":
    main()
