"""Where training time goes at the paper's settings, and this machine's ceilings.

The real en-de bitext encoded with the 50k sentencepiece model (the training file of
``train_speed.py``, 100k pairs), dim 1024, batch 128, the sparse (lazy Adam) optimizer, lr 0.001,
``torch`` threads ``--threads``. ``psp_core.training.steps.train_megabatch`` runs with its
:class:`~psp_core.training.steps.PhaseTimes`: for mega-batch 100 (12,800 pairs) and for mega-batch
1 (128 pairs, the same number of steps), each phase's seconds per 100 steps after one warm-up
mega-batch (``--megabatches`` measured): data loading (the next pairs from the file), encode
(the mega-batch's embeddings for mining), hashes, mine, assemble (a mini-batch's ids with its
negatives), forward, backward, optimizer. Then mining split on one mega-batch of 12,800 pairs
of the warmed-up model: the bfloat16 block products alone, plain float32 mining, the default
(bfloat16 screening + float32 re-scoring), bfloat16 mining, and the share of anchors for which
the default picks the negative plain float32 mining picks (the screen must change nothing: the
quality check of cheaper mining, on real data). Ceilings: matrix product GFLOP/s
(float32 and bfloat16, the mining block's shape) and memory bandwidth (a large copy).

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import _common
import numpy as np
import train_speed

log = _common.log
PHASES = ("load", "encode", "hashes", "mine", "assemble", "forward", "backward", "optimizer")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=128)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--megabatches", type=int, default=3, help="measured, after warm-up")
    parser.add_argument("--pairs", type=int, default=100_000, help="training file size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="of each mining timing")
    parser.add_argument(
        "--megabatch", type=int, default=100, help="the large mega-batch profiled beside 1"
    )
    parser.add_argument(
        "--window", type=int, default=100, help="steps per measured mega-batch (of size 1: calls)"
    )
    parser.add_argument("--mining-pairs", type=int, default=12_800, help="pairs mined at once")
    parser.add_argument("--copy-mib", type=int, default=256, help="of the bandwidth ceiling")
    add_quick_arguments(parser)
    parser.add_argument("--verbose", action="store_true")
    return quick_settings(parser.parse_args(argv))


def add_quick_arguments(parser) -> None:
    """``--quick`` for this script and the ones built on :func:`setup`."""
    _common.add_quick_argument(
        parser,
        "the quick sentencepiece model and bitext slice, dim 32, batch 32, mega-batch 4, "
        "512 pairs mined, 1 thread",
    )


def quick_settings(args: argparse.Namespace) -> argparse.Namespace:
    """The tiny settings of ``--quick`` (left alone without it)."""
    if args.quick:
        args.vocab_size, args.dim, args.batch_size = _common.QUICK_VOCAB_SIZE, _common.QUICK_DIM, 32
        args.pairs = min(args.pairs, _common.QUICK_PAIRS)
        args.megabatches, args.repeats, args.threads = 1, 1, 1
        args.megabatch, args.window, args.mining_pairs, args.copy_mib = 4, 8, 512, 8
    return args


def setup(args):
    import torch

    from psp_core import TrainConfig, TrainingFile
    from psp_core.training.encoder import MeanEmbeddingEncoder
    from psp_core.training.optim import build_optimizer
    from psp_core.training.steps import StepSettings

    torch.set_num_threads(args.threads)
    quick_pairs = _common.QUICK_PAIRS if args.quick else None
    spm_file, spm_info = _common.spm_model(
        args.data_dir, args.results_dir, vocab_size=args.vocab_size, max_pairs=quick_pairs
    )
    path, _ = train_speed.training_file(
        args.data_dir,
        args.results_dir,
        spm_file,
        spm_info,
        args.pairs,
        args.seed,
        args.threads,
        {},
        bitext_pairs=quick_pairs,
    )
    data = TrainingFile(path)
    torch.manual_seed(args.seed)
    model = MeanEmbeddingEncoder(data.info.vocab_size, args.dim, sparse=True)
    model.reset_parameters(torch.Generator().manual_seed(args.seed))
    optimizer = build_optimizer(model, "sparse", 0.001)
    config = TrainConfig(batch_size=args.batch_size)  # the paper's margin, clip and mining
    settings = StepSettings.from_config(
        config, device=torch.device("cpu"), negatives_from="opposite"
    )
    return data, model, optimizer, settings


def phase_profile(args, data, model, optimizer, settings, megabatch: int) -> dict:
    """Seconds per 100 steps of each phase, training at a fixed ``megabatch``."""
    from psp_core.training.data import EpochStream
    from psp_core.training.steps import PhaseTimes, train_megabatch

    stream = EpochStream(data, seed=args.seed, epoch=0, block_size=100_000)
    pairs = megabatch * args.batch_size
    steps_per_call = megabatch
    calls_warmup = max(1, args.window // steps_per_call) if megabatch < args.window else 1
    calls = args.megabatches * max(1, args.window // steps_per_call)
    step = 0
    times = PhaseTimes()
    wall = 0.0
    for call in range(calls_warmup + calls):
        measured = call >= calls_warmup
        started = time.perf_counter()
        load_started = time.perf_counter()
        mega = stream.take(pairs)
        load = time.perf_counter() - load_started
        if len(mega) < pairs:
            stream = EpochStream(data, seed=args.seed, epoch=call + 1, block_size=100_000)
            mega = stream.take(pairs)
        train_megabatch(
            model, optimizer, mega, settings, first_step=step, times=times if measured else None
        )
        step += megabatch
        if measured:
            times.seconds["load"] += load
            wall += time.perf_counter() - started
    measured_steps = calls * steps_per_call
    per_100 = {k: round(times.seconds.get(k, 0.0) * 100 / measured_steps, 3) for k in PHASES}
    per_100["total"] = round(wall * 100 / measured_steps, 3)
    per_100["other"] = round(per_100["total"] - sum(per_100[k] for k in PHASES), 3)
    return {
        "megabatch": megabatch,
        "measured_steps": measured_steps,
        "pairs_per_s": round(measured_steps * args.batch_size / wall),
        "seconds_per_100_steps": per_100,
    }


def mining_split(args, data, model, settings) -> dict:
    """One mega-batch of ``--mining-pairs`` pairs of the trained model: the ways to mine it,
    timed."""
    import torch

    from psp_core.training.data import EpochStream
    from psp_core.training.negative_mining import fast_bfloat16_available, mine_hard_negatives
    from psp_core.training.steps import encode

    stream = EpochStream(data, seed=args.seed + 1, epoch=0, block_size=100_000)
    mega = stream.take(args.mining_pairs)
    with torch.no_grad():
        model.eval()
        source, target = (
            encode(model, mega.source, settings.device),
            encode(model, mega.target, settings.device),
        )
    hashes = hash_tensors(mega, settings.device)

    def timed(fn) -> float:
        fn()  # warm-up
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - started)
        return round(float(np.median(seconds)), 3)

    unit_s = torch.nn.functional.normalize(source, dim=1)
    unit_t = torch.nn.functional.normalize(target, dim=1)

    def products(dtype):
        low_s, low_t = unit_s.to(dtype), unit_t.to(dtype).t().contiguous()

        def run():
            for start in range(0, len(low_s), 512):
                _ = low_s[start : start + 512] @ low_t

        return run

    def mine(**kw):
        return lambda: mine_hard_negatives(source, target, *hashes, negatives_from="opposite", **kw)

    n = len(source)
    flops = 2 * n * n * source.shape[1]
    fast = fast_bfloat16_available(settings.device)
    result = {
        "fast_bfloat16": fast,
        "pairs": n,
        "product_tflop": round(flops / 1e12, 3),
        "products_only_float32_s": timed(products(torch.float32)),
        "mine_float32_plain_s": timed(mine(screen=False)),
    }
    if not fast:
        # bfloat16 products run at about 1 GFLOP/s without AVX512-BF16 (a Zen 3 host): the
        # default mining is the plain float32 above, and bfloat16 timings would take minutes
        return result
    exact, screened = mine(screen=False)(), mine()()
    # the default (bfloat16 screen, float32 re-scoring) against plain float32 products: the
    # share of anchors given the same negative (1.0: the screen changes nothing)
    result["screen_same_negative_as_float32"] = {
        side: round(float((getattr(screened, side) == getattr(exact, side)).float().mean()), 6)
        for side in ("for_source", "for_target")
    }
    result["products_only_bfloat16_s"] = timed(products(torch.bfloat16))
    result["mine_default_s"] = timed(mine())
    result["mine_bfloat16_s"] = timed(mine(dtype=torch.bfloat16))
    return result


def hash_tensors(mega, device):
    """The sentence hashes of a mega-batch's two sides, as the trainer mines with them."""
    import torch

    from psp_core.training.negative_mining import sentence_hashes

    return tuple(
        torch.from_numpy(sentence_hashes(side.ids, side.offsets)).to(device)
        for side in (mega.source, mega.target)
    )


def ceilings(args) -> dict:
    """Matrix product GFLOP/s at the mining block's shape (512 anchors, ``--dim``, the
    ``--mining-pairs`` candidates) and the bandwidth of a ``--copy-mib`` copy."""
    import torch

    def gflops(dtype) -> float:
        a = torch.randn(512, args.dim).to(dtype)
        b = torch.randn(args.dim, args.mining_pairs).to(dtype)
        started = time.perf_counter()
        a @ b
        # 20 rounds, or 1 where one takes seconds (bfloat16 without AVX512-BF16: ~1 GFLOP/s)
        rounds = 20 if time.perf_counter() - started < 0.5 else 1
        started = time.perf_counter()
        for _ in range(rounds):
            a @ b
        seconds = time.perf_counter() - started
        return round(2 * 512 * args.dim * args.mining_pairs * rounds / seconds / 1e9, 1)

    big = torch.empty(args.copy_mib * 1024 * 1024 // 4, dtype=torch.float32).fill_(1.0)
    out = torch.empty_like(big)
    out.copy_(big)
    started = time.perf_counter()
    rounds = 10
    for _ in range(rounds):
        out.copy_(big)
    seconds = time.perf_counter() - started
    return {
        "matmul_float32_gflops": gflops(torch.float32),
        "matmul_bfloat16_gflops": gflops(torch.bfloat16),
        "copy_gb_per_s": round(2 * big.numel() * 4 * rounds / seconds / 1e9, 1),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return 0
    result: dict = {"machine": _common.machine_info(), "threads": args.threads}
    result["ceilings"] = ceilings(args)
    log.info("ceilings: %s", result["ceilings"])
    data, model, optimizer, settings = setup(args)
    large = f"megabatch_{args.megabatch}"
    result[large] = phase_profile(args, data, model, optimizer, settings, args.megabatch)
    log.info("mega-batch %d: %s", args.megabatch, result[large])
    result["megabatch_1"] = phase_profile(args, data, model, optimizer, settings, 1)
    log.info("mega-batch 1: %s", result["megabatch_1"])
    result[f"mining_{args.mining_pairs}"] = mining_split(args, data, model, settings)
    log.info("mining: %s", result[f"mining_{args.mining_pairs}"])
    result["loadavg_end"] = _common.loadavg()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
