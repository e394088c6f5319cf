"""Cheaper hard-negative mining, measured against exact mining (benchmarks/RESULTS.md#mining-screen).

One mega-batch of 12,800 shared en-de pairs, embedded by a model trained for ``--warm-steps``
steps at the paper's settings (``train_profile.py``'s setup: 50k vocabulary, dim 1024). For each
candidate screen, the bitext rule (a source's negative among the targets, and the reverse):

* ``exact``: ``mine_hard_negatives`` as the trainer runs it (bfloat16 screening with float32
  re-scoring: the float32 hardest negatives);
* ``prefix{d}-top{k}``: similarities of the vectors' first ``d`` dimensions (bfloat16, both
  directions), the ``k`` best candidates per anchor under the same exclusions, re-scored on the
  whole vectors in float32; the best of those is the negative.

Reported per screen: seconds (median of ``--repeats``), the share of anchors whose negative is
the exact one, and the share whose negative is within 0.01 cosine of the exact one's (the
issue's agreement rule: >= 95%). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import _common
import numpy as np
import train_profile

log = _common.log


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warm-steps", type=int, default=300, help="training before mining")
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--tops", default="4,16,64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--megabatches", type=int, default=1)
    parser.add_argument("--mining-pairs", type=int, default=12_800, help="pairs of a mega-batch")
    train_profile.add_quick_arguments(parser)
    parser.add_argument("--verbose", action="store_true")
    args = train_profile.quick_settings(parser.parse_args(argv))
    if args.quick:
        args.warm_steps, args.dims, args.tops = 16, "8,16", "4,16"
    return args


def prefix_screen(source, target, source_hash, target_hash, dim: int, top: int, chunk=512):
    """Negatives for sources and targets by a ``dim``-prefix bfloat16 screen of ``top``
    candidates, re-scored in float32 on the whole (unit) vectors."""
    import torch

    from psp_core.training.negative_mining import Exclusions, equal_hash_positions

    device = source.device
    s_hash, t_hash = source_hash.cpu().numpy(), target_hash.cpu().numpy()

    def side(anchors, pool, exclusions):
        low_a, low_p = anchors[:, :dim].bfloat16(), pool[:, :dim].bfloat16().t().contiguous()
        chosen = torch.empty(len(anchors), dtype=torch.long)
        for start in range(0, len(anchors), chunk):
            stop = min(start + chunk, len(anchors))
            block = low_a[start:stop] @ low_p
            a, c = exclusions.between(start, stop)
            block[a - start, c] = float("-inf")
            candidates = block.topk(top, dim=1).indices  # [rows, top]
            exact = torch.einsum("rd,rkd->rk", anchors[start:stop], pool[candidates])
            exact[torch.isneginf(block.gather(1, candidates).float())] = float("-inf")
            chosen[start:stop] = candidates.gather(1, exact.argmax(dim=1, keepdim=True))[:, 0]
        return chosen

    for_rows = Exclusions(*equal_hash_positions([s_hash, t_hash], t_hash), device)
    for_cols = Exclusions(*equal_hash_positions([t_hash, s_hash], s_hash), device)
    return side(source, target, for_rows), side(target, source, for_cols)


def main(argv=None) -> int:
    import torch
    import torch.nn.functional as F

    from psp_core.training.data import EpochStream
    from psp_core.training.negative_mining import mine_hard_negatives
    from psp_core.training.steps import encode, train_megabatch

    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return 0
    data, model, optimizer, settings = train_profile.setup(args)
    stream = EpochStream(data, seed=args.seed, epoch=0, block_size=100_000)
    steps = 0
    while steps < args.warm_steps:  # a model past its random start, as mining sees it
        if len(mega := stream.take(args.mining_pairs)) == 0:
            break  # the training file is shorter than the warm-up
        steps += len(train_megabatch(model, optimizer, mega, settings, first_step=steps))
    mega = stream.take(args.mining_pairs)
    model.eval()
    with torch.no_grad():
        source = F.normalize(encode(model, mega.source, settings.device), dim=1)
        target = F.normalize(encode(model, mega.target, settings.device), dim=1)
    hashes = train_profile.hash_tensors(mega, settings.device)

    def timed(fn):
        result = fn()
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - started)
        return result, round(float(np.median(seconds)), 3)

    exact, exact_s = timed(
        lambda: mine_hard_negatives(source, target, *hashes, negatives_from="opposite")
    )
    exact_s_neg, exact_t_neg = exact.for_source, exact.for_target

    def score(anchors, pool, chosen):
        return (anchors * pool[chosen.clamp(min=0)]).sum(dim=1)

    best_s, best_t = score(source, target, exact_s_neg), score(target, source, exact_t_neg)
    result = {"machine": _common.machine_info(), "warm_steps": steps, "pairs": len(mega)}
    result["exact"] = {"seconds": exact_s}
    for dim in [int(x) for x in args.dims.split(",")]:
        for top in [int(x) for x in args.tops.split(",")]:
            (for_s, for_t), seconds = timed(
                lambda dim=dim, top=top: prefix_screen(source, target, *hashes, dim, top)
            )
            same = torch.cat([for_s == exact_s_neg, for_t == exact_t_neg]).float().mean()
            gap = torch.cat(
                [best_s - score(source, target, for_s), best_t - score(target, source, for_t)]
            )
            result[f"prefix{dim}-top{top}"] = {
                "seconds": seconds,
                "same_negative": round(float(same), 4),
                "within_0.01_cosine": round(float((gap <= 0.01).float().mean()), 4),
                "max_gap": round(float(gap.max()), 4),
            }
            log.info("prefix %d top %d: %s", dim, top, result[f"prefix{dim}-top{top}"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
