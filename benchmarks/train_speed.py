"""Training speed (pairs/s) and peak memory of psp_core's trainer on the real en-de bitext.

Speed: for each optimizer (``sparse``, ``dense``), mega-batch size (default 1, 20, 100; dim
1024, vocab 50,000) and, for ``sparse``, each negative-mining precision (default
``float32-plain``, the baseline of plain float32 products, then ``float32``, the same negatives
found by bfloat16 screening + float32 re-scoring) and each dropout (``--dropouts``, default 0)
one ``psp_core.train(...)`` run with a fixed mega-batch
(``anneal_every=0``), ``max_steps``, ``epochs=1``, no logging and no periodic checkpoints. Every
step is timestamped through ``on_step``; the first mega-batch is warm-up, and the throughput is
measured over whole mega-batches after it (so the once-per-mega-batch negative mining is counted
in full): ``pairs/s = measured_steps * 128 / seconds``.

Peak RSS: for each corpus size (default 100k and 1M pairs) a separate child process trains with
the sparse optimizer at a fixed mega-batch for the same number of steps (default: one epoch of
the smallest corpus) and reports ``ru_maxrss`` at its end (and VmHWM at its last step, before the
final checkpoint/bundle writes).

Training files are built with ``TrainingFileWriter`` from the en-de bitext encoded with the 50k
sentencepiece model, resampled with a seeded RNG (concatenated permutations) to the corpus size,
and cached under benchmarks/results/ with the model.

Targets: >= 2,000 pairs/s at mega-batch 100 with the sparse optimizer (2 cores); peak RSS of the
two corpus sizes within 10%.

Prints one JSON object on stdout; logs go to stderr. ``--quick`` runs a small smoke version.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common
import numpy as np

TARGET_PAIRS_PER_S = 2_000
TARGET_MEGABATCH = 100
TARGET_RSS_RATIO = 1.10

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=128)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all usable cores)"
    )
    parser.add_argument("--megabatches", default="1,20,100", help="comma-separated sizes")
    parser.add_argument("--optimizers", default="sparse,dense")
    parser.add_argument(
        "--mining-dtypes",
        default="float32-plain,float32",
        help="comma-separated TrainConfig.mining_dtype values to measure with the sparse "
        "optimizer (float32-plain is the baseline; dense runs use the default, float32)",
    )
    parser.add_argument(
        "--dropouts",
        default="0",
        help="comma-separated TrainConfig.dropout values to measure with the sparse optimizer "
        "(0, the paper's default, is the baseline; dense runs use 0)",
    )
    parser.add_argument(
        "--sparse-steps",
        type=int,
        default=200,
        help="measured steps after warm-up for the sparse optimizer (rounded up to whole "
        "mega-batches)",
    )
    parser.add_argument(
        "--dense-steps", type=int, default=20, help="likewise for dense Adam (slow)"
    )
    parser.add_argument("--warmup-megabatches", type=int, default=1)
    parser.add_argument(
        "--corpus-sizes", default="100000,1000000", help="pairs; the first is used for speed"
    )
    parser.add_argument("--rss-megabatch", type=int, default=100)
    parser.add_argument(
        "--rss-steps",
        type=int,
        default=None,
        help="steps per RSS run (default: one epoch of the smallest corpus)",
    )
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument(
        "--spm-max-pairs",
        type=int,
        default=None,
        help="train the sentencepiece model on only the first N bitext pairs",
    )
    parser.add_argument("--seed", type=int, default=0, help="corpus resampling seed")
    _common.add_quick_argument(
        parser,
        "the quick sentencepiece model and bitext slice, dim 32, batch 16, a 1k corpus, "
        "mega-batch 2, 2 steps, 1 thread",
    )
    parser.add_argument("--verbose", action="store_true")
    # internal: one peak-RSS training run in this (child) process
    parser.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spm-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab_size = _common.QUICK_VOCAB_SIZE
        args.spm_max_pairs = args.spm_max_pairs or _common.QUICK_PAIRS
        args.dim = _common.QUICK_DIM
        args.batch_size = 16
        args.megabatches = "2"
        args.sparse_steps = args.dense_steps = 2
        args.corpus_sizes = "1000"  # one peak-RSS child process
        args.rss_megabatch = 2
        args.rss_steps = args.rss_steps or 4
        args.threads = args.threads or 1
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0))
    args.megabatches = [int(x) for x in str(args.megabatches).split(",") if x.strip()]
    args.optimizers = [x.strip() for x in str(args.optimizers).split(",") if x.strip()]
    args.mining_dtypes = [x.strip() for x in str(args.mining_dtypes).split(",") if x.strip()]
    args.corpus_sizes = [int(x) for x in str(args.corpus_sizes).split(",") if x.strip()]
    args.dropouts = [float(x) for x in str(args.dropouts).split(",") if x.strip()]
    return args


# --------------------------------------------------------------------------------------------
# training files


def encode_bitext(data_dir: Path, spm_path: Path, threads: int, limit: int | None = None):
    """The en-de bitext (its first ``limit`` pairs when given) encoded, without empty sides."""
    from psp_core import Tokenizer

    english, german = _common.read_bitext(data_dir, "de", limit)
    tokenizer = Tokenizer.from_file(spm_path, num_threads=threads)
    started = time.perf_counter()
    en, de = tokenizer.encode(english), tokenizer.encode(german)
    log.info(
        "encoded %d en-de pairs in %.1f s (%.1f / %.1f pieces per sentence)",
        len(en),
        time.perf_counter() - started,
        len(en.ids) / len(en),
        len(de.ids) / len(de),
    )
    keep = np.flatnonzero((en.lengths > 0) & (de.lengths > 0))
    if len(keep) < len(en):
        log.info("dropping %d pairs with an empty side", len(en) - len(keep))
        en, de = en.take(keep), de.take(keep)
    return en, de, tokenizer


def training_file(
    data_dir: Path,
    results_dir: Path,
    spm_path: Path,
    spm_info: dict,
    n_pairs: int,
    seed: int,
    threads: int,
    encoded: dict,
    bitext_pairs: int | None = None,
) -> tuple[Path, dict]:
    """Build (or reuse) a training HDF5 of ``n_pairs`` en-de pairs resampled from the bitext
    (from its first ``bitext_pairs`` pairs when given)."""
    from psp_core import TrainingFile, TrainingFileWriter

    source = f"-first{bitext_pairs}" if bitext_pairs else ""
    path = results_dir / f"train-en-de{source}-{spm_info['sha256'][:12]}-{n_pairs}-seed{seed}.h5"
    info = {"path": str(path), "n_pairs": n_pairs, "seed": seed}
    if path.is_file():
        try:
            with TrainingFile(path) as existing:
                if len(existing) == n_pairs and existing.info.spm_sha256 == spm_info["sha256"]:
                    info.update(cached=True, bytes=path.stat().st_size)
                    return path, info
        except (OSError, ValueError) as error:
            log.warning("rebuilding %s (%s)", path, error)
    if "pairs" not in encoded:
        encoded["pairs"] = encode_bitext(data_dir, spm_path, threads, bitext_pairs)
    en, de, tokenizer = encoded["pairs"]
    rng = np.random.default_rng(seed)
    rounds = math.ceil(n_pairs / len(en))
    index = np.concatenate([rng.permutation(len(en)) for _ in range(rounds)])[:n_pairs]
    started = time.perf_counter()
    chunk = 100_000
    with TrainingFileWriter(
        path, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256, lang="de", seed=seed
    ) as writer:
        for start in range(0, n_pairs, chunk):
            rows = index[start : start + chunk]
            writer.append(en.take(rows), de.take(rows))
    info.update(
        cached=False,
        build_seconds=round(time.perf_counter() - started, 1),
        bytes=path.stat().st_size,
        source_pairs=len(en),
    )
    log.info("wrote %s (%d pairs) in %.1f s", path, n_pairs, info["build_seconds"])
    return path, info


# --------------------------------------------------------------------------------------------
# speed


def speed_run(
    data_file: Path,
    spm_file: Path,
    work_dir: Path,
    args: argparse.Namespace,
    optimizer: str,
    megabatch: int,
    n_pairs: int,
    mining_dtype: str,
    dropout: float = 0.0,
) -> dict:
    from psp_core import TrainConfig, train

    wanted = args.sparse_steps if optimizer == "sparse" else args.dense_steps
    measured_megabatches = max(1, math.ceil(wanted / megabatch))
    warmup_steps = args.warmup_megabatches * megabatch
    measured_steps = measured_megabatches * megabatch
    max_steps = warmup_steps + measured_steps
    if max_steps * args.batch_size > n_pairs:
        log.warning(
            "%d steps need %d pairs but the corpus has %d: the epoch ends early",
            max_steps,
            max_steps * args.batch_size,
            n_pairs,
        )
    config = TrainConfig(
        dim=args.dim,
        batch_size=args.batch_size,
        max_megabatch=megabatch,
        anneal_every=0,
        epochs=1,
        max_steps=max_steps,
        optimizer=optimizer,
        mining_dtype=mining_dtype,
        dropout=dropout,
        log_every=0,
        checkpoint_every=0,
        device="cpu",
        num_threads=args.threads,
    )
    stamps: dict[int, float] = {}
    cpu: dict[int, float] = {}

    def on_step(step: int, loss: float) -> None:
        stamps[step] = time.perf_counter()
        cpu[step] = time.process_time()

    out = work_dir / f"{optimizer}-m{megabatch}-{mining_dtype}-d{dropout}"
    log.info(
        "speed: optimizer=%s mining=%s dropout=%s megabatch=%d steps=%d (warm-up %d)",
        optimizer,
        mining_dtype,
        dropout,
        megabatch,
        max_steps,
        warmup_steps,
    )
    started = time.perf_counter()
    try:
        result = train(
            data_file,
            spm_file,
            out,
            config,
            checkpoint_dir=work_dir / f"{out.name}.ckpt",
            resume=False,
            on_step=on_step,
        )
        total = time.perf_counter() - started
        steps_done = result.state.step
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work_dir / f"{out.name}.ckpt", ignore_errors=True)
    if warmup_steps not in stamps or steps_done not in stamps or steps_done <= warmup_steps:
        raise RuntimeError(f"run ended after {steps_done} steps, before the measured window")
    last = min(steps_done, max_steps)
    seconds = stamps[last] - stamps[warmup_steps]
    measured = last - warmup_steps
    record = {
        "optimizer": optimizer,
        "mining_dtype": mining_dtype,
        "dropout": dropout,
        "megabatch": megabatch,
        "steps": steps_done,
        "warmup_steps": warmup_steps,
        "measured_steps": measured,
        "measured_seconds": round(seconds, 3),
        "pairs_per_s": round(measured * args.batch_size / seconds, 1),
        "ms_per_step": round(1000 * seconds / measured, 2),
        "cpu_per_wall": round((cpu[last] - cpu[warmup_steps]) / seconds, 2),
        "first_step_s": round(stamps[min(stamps)] - started, 3),
        "warmup_s": round(stamps[warmup_steps] - started, 3),
        "train_call_s": round(total, 3),
    }
    log.info("  -> %.0f pairs/s (%.1f ms/step)", record["pairs_per_s"], record["ms_per_step"])
    return record


# --------------------------------------------------------------------------------------------
# peak RSS


def rss_child(args: argparse.Namespace) -> int:
    """Run in a child process: train, then print one JSON line with this process's peaks."""
    import torch

    from psp_core import TrainConfig, train
    from psp_core.training.training_file import TrainingFile

    with TrainingFile(args.data_file) as data:
        n_pairs = len(data)
    rss_after_import = _common.status_kb("VmRSS")
    config = TrainConfig(
        dim=args.dim,
        batch_size=args.batch_size,
        max_megabatch=args.rss_megabatch,
        anneal_every=0,
        epochs=1_000_000,
        max_steps=args.rss_steps,
        optimizer="sparse",
        log_every=0,
        checkpoint_every=0,
        device="cpu",
        num_threads=args.threads,
    )
    seen: dict = {"first": None, "hwm": None, "rss": None, "steps": 0, "t0": None, "t1": None}

    def on_step(step: int, loss: float) -> None:
        now = time.perf_counter()
        if seen["first"] is None:
            seen["first"] = _common.status_kb("VmRSS")
            seen["t0"] = now
        seen["hwm"], seen["rss"], seen["steps"], seen["t1"] = (
            _common.status_kb("VmHWM"),
            _common.status_kb("VmRSS"),
            step,
            now,
        )

    out = args.work_dir / f"rss-{n_pairs}"
    started = time.perf_counter()
    try:
        result = train(
            args.data_file,
            args.spm_file,
            out,
            config,
            checkpoint_dir=args.work_dir / f"rss-{n_pairs}.ckpt",
            resume=False,
            on_step=on_step,
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(args.work_dir / f"rss-{n_pairs}.ckpt", ignore_errors=True)
    maxrss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    steps = result.state.step
    pairs_read = result.state.epoch * n_pairs + result.state.position
    span = (seen["t1"] or 0) - (seen["t0"] or 0)
    record = {
        "corpus_pairs": n_pairs,
        "steps": steps,
        "pairs_trained": pairs_read,
        "fraction_of_corpus_read": round(pairs_read / n_pairs, 4),
        "epochs_completed": result.state.epoch,
        "ru_maxrss_mib": round(maxrss_kb / 1024, 1),
        "vmhwm_at_last_step_mib": round(seen["hwm"] / 1024, 1) if seen["hwm"] else None,
        "vmrss_at_last_step_mib": round(seen["rss"] / 1024, 1) if seen["rss"] else None,
        "vmrss_at_first_step_mib": round(seen["first"] / 1024, 1) if seen["first"] else None,
        "vmrss_after_imports_mib": round(rss_after_import / 1024, 1) if rss_after_import else None,
        "seconds": round(time.perf_counter() - started, 1),
        "pairs_per_s_after_first_step": round((steps - 1) * args.batch_size / span, 1)
        if span > 0
        else None,
        "torch_threads": torch.get_num_threads(),
    }
    sys.stdout.write("RSS_RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
    return 0


def rss_run(data_file: Path, spm_file: Path, work_dir: Path, args, steps: int) -> dict:
    command = [
        sys.executable, str(Path(__file__).resolve()), "--rss-child",
        "--data-file", str(data_file), "--spm-file", str(spm_file), "--work-dir", str(work_dir),
        "--dim", str(args.dim), "--batch-size", str(args.batch_size),
        "--threads", str(args.threads), "--rss-megabatch", str(args.rss_megabatch),
        "--rss-steps", str(steps),
    ]  # fmt: skip
    log.info("peak RSS: child process on %s, %d steps", data_file.name, steps)
    completed = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    lines = [x for x in completed.stdout.splitlines() if x.startswith("RSS_RESULT ")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"RSS child failed with exit code {completed.returncode}")
    record = json.loads(lines[-1][len("RSS_RESULT ") :])
    log.info(
        "  -> ru_maxrss %.0f MiB, VmHWM at last step %.0f MiB",
        record["ru_maxrss_mib"],
        record["vmhwm_at_last_step_mib"] or float("nan"),
    )
    return record


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if args.rss_child:
        return rss_child(args)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return 0

    machine = _common.machine_info()
    spm_file, spm_info = _common.spm_model(
        args.data_dir, args.results_dir, vocab_size=args.vocab_size, max_pairs=args.spm_max_pairs
    )
    encoded: dict = {}
    files = {}
    for n_pairs in args.corpus_sizes:
        files[n_pairs] = training_file(
            args.data_dir,
            args.results_dir,
            spm_file,
            spm_info,
            n_pairs,
            args.seed,
            args.threads,
            encoded,
            bitext_pairs=_common.QUICK_PAIRS if args.quick else None,
        )
    encoded.clear()
    work_dir = args.results_dir / f"tmp-train-{os.getpid()}"
    work_dir.mkdir(parents=True, exist_ok=True)

    speed: list[dict] = []
    rss: list[dict] = []
    smallest = min(args.corpus_sizes)
    rss_steps = args.rss_steps or math.ceil(smallest / args.batch_size)
    try:
        if not args.skip_speed:
            speed_pairs = args.corpus_sizes[0]
            for optimizer in args.optimizers:
                dtypes = args.mining_dtypes if optimizer == "sparse" else ["float32"]
                dropouts = args.dropouts if optimizer == "sparse" else [0.0]
                runs = itertools.product(dropouts, args.megabatches, dtypes)
                for dropout, megabatch, mining_dtype in runs:
                    speed.append(
                        speed_run(
                            files[speed_pairs][0],
                            spm_file,
                            work_dir,
                            args,
                            optimizer,
                            megabatch,
                            speed_pairs,
                            mining_dtype,
                            dropout,
                        )
                    )
        if not args.skip_rss:
            for n_pairs in args.corpus_sizes:
                rss.append(rss_run(files[n_pairs][0], spm_file, work_dir, args, rss_steps))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    targets: dict = {}
    at_target = [
        r
        for r in speed
        if r["optimizer"] == "sparse"
        and r["megabatch"] == TARGET_MEGABATCH
        and r["mining_dtype"] == "float32"
        and r["dropout"] == 0.0
    ]
    if at_target:
        targets["sparse_megabatch_100_pairs_per_s"] = {
            "target": TARGET_PAIRS_PER_S,
            "measured": at_target[0]["pairs_per_s"],
            "passed": at_target[0]["pairs_per_s"] >= TARGET_PAIRS_PER_S,
        }
    else:
        targets["sparse_megabatch_100_pairs_per_s"] = {
            "target": TARGET_PAIRS_PER_S,
            "measured": None,
            "passed": None,
        }
    if len(rss) >= 2:
        peaks = [r["ru_maxrss_mib"] for r in rss]
        during = [r["vmhwm_at_last_step_mib"] for r in rss]
        ratio = max(peaks) / min(peaks)
        targets["peak_rss_ratio"] = {
            "target_max_ratio": TARGET_RSS_RATIO,
            "ru_maxrss_mib": dict(zip([str(r["corpus_pairs"]) for r in rss], peaks, strict=True)),
            "ratio_largest_to_smallest": round(ratio, 4),
            "passed": ratio <= TARGET_RSS_RATIO,
            "vmhwm_at_last_step_ratio": round(max(during) / min(during), 4)
            if all(during)
            else None,
        }

    result = {
        "benchmark": "train_speed",
        "machine": machine,
        "parameters": {
            "dim": args.dim,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "megabatches": args.megabatches,
            "optimizers": args.optimizers,
            "mining_dtypes": args.mining_dtypes,
            "dropouts": args.dropouts,
            "sparse_steps_requested": args.sparse_steps,
            "dense_steps_requested": args.dense_steps,
            "warmup_megabatches": args.warmup_megabatches,
            "speed_corpus_pairs": args.corpus_sizes[0],
            "corpus_sizes": args.corpus_sizes,
            "rss_megabatch": args.rss_megabatch,
            "rss_steps": rss_steps,
            "rss_optimizer": "sparse",
            "quick": args.quick,
            "spm": spm_info,
            "training_files": [info for _, info in files.values()],
            "train_config": "TrainConfig(anneal_every=0, epochs=1, log_every=0, "
            "checkpoint_every=0, device='cpu', lr/margin/grad_clip defaults)",
        },
        "speed": speed,
        "peak_rss": rss,
        "targets": targets,
        "loadavg_at_end": _common.loadavg(),
    }
    _common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
