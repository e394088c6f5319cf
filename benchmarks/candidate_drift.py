"""How far an anchor's hardest negative moves in an epoch: do the k best candidates of one epoch
still hold the next epoch's hardest negative? (issue 29 part 2, remembered candidates)

``train_profile.py``'s setup (the en-de training file of ``train_speed.py``, the 50k
sentencepiece model, dim 1024, batch 128, sparse Adam, the paper's margin and mining) trains at
mega-batch 100 without annealing, lr ``--lr``, for ``--epochs`` epochs. After each epoch (and
before the first) one fixed probe mega-batch of 12,800 pairs is embedded and mined exactly under
the trainer's exclusions (both sides, bitext); its k best candidates per anchor are kept. For
each later epoch and each earlier one, and k in 4, 8, 16, 32, 64: the share of anchors whose
best candidate among the earlier epoch's k, re-scored now, is the exact hardest negative (or ties
it), and the share within 0.01 cosine of it (the issue's rule).

Prints one JSON object per epoch on stdout as it goes; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import _common
import train_profile

KS = (4, 8, 16, 32, 64)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_model_arguments(parser, batch_size=128)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--pairs", type=int, default=100_000, help="training file size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument(
        "--mining-pairs", type=int, default=12_800, help="pairs of a mega-batch and of the probe"
    )
    train_profile.add_quick_arguments(parser)
    args = train_profile.quick_settings(parser.parse_args(argv))
    if args.quick:
        args.epochs = 1
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    import torch

    from psp_core.training.data import EpochStream
    from psp_core.training.negative_mining import equal_hash_positions, mine_hard_negatives
    from psp_core.training.steps import encode, train_megabatch

    data, model, optimizer, settings = train_profile.setup(args)
    for group in optimizer.param_groups:
        group["lr"] = args.lr
    probe = EpochStream(data, seed=99, epoch=0, block_size=100_000).take(args.mining_pairs)
    source_hash, target_hash = train_profile.hash_tensors(probe, settings.device)
    sh, th = source_hash.numpy(), target_hash.numpy()
    row_excluded = equal_hash_positions([sh, th], th)
    col_excluded = equal_hash_positions([th, sh], sh)

    def state():
        """Per side: the probe's similarities now (-inf where excluded) and each anchor's
        best candidates."""
        model.eval()
        with torch.no_grad():
            s = torch.nn.functional.normalize(encode(model, probe.source, settings.device), dim=1)
            t = torch.nn.functional.normalize(encode(model, probe.target, settings.device), dim=1)
        rows = s @ t.t()
        cols = rows.t().contiguous()  # before the rows' exclusions: each side has its own
        rows[row_excluded[0], row_excluded[1]] = float("-inf")
        cols[col_excluded[0], col_excluded[1]] = float("-inf")
        exact = mine_hard_negatives(s, t, source_hash, target_hash, screen=False)
        out = {}
        for side, scores, chosen in (
            ("source", rows, exact.for_source),
            ("target", cols, exact.for_target),
        ):
            top = scores.topk(max(KS), dim=1)
            # the trainer's negative is a best candidate (ties and float rounding aside)
            best = scores.gather(1, chosen.unsqueeze(1)).squeeze(1)
            torch.testing.assert_close(best, top.values[:, 0], atol=1e-5, rtol=0)
            out[side] = (scores, top.values[:, 0], top.indices)
        return out

    history = [(0, {side: v[2] for side, v in state().items()})]
    step = 0
    for epoch in range(args.epochs):
        started = time.perf_counter()
        stream = EpochStream(data, seed=args.seed, epoch=epoch, block_size=100_000)
        while len(mega := stream.take(args.mining_pairs)) > 0:
            step += len(train_megabatch(model, optimizer, mega, settings, first_step=step))
        record = {
            "epoch": epoch + 1,
            "lr": args.lr,
            "train_s": round(time.perf_counter() - started, 1),
        }
        now = state()
        for recorded, lists in history:
            for side in ("source", "target"):
                scores, best, _ = now[side]
                for k in KS:
                    remembered = scores.gather(1, lists[side][:, :k]).max(dim=1).values
                    same = float((remembered >= best).float().mean())
                    within = float((remembered >= best - 0.01).float().mean())
                    record[f"from_epoch{recorded}_{side}_k{k}"] = [round(same, 4), round(within, 4)]
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()
        history.append((epoch + 1, {side: v[2] for side, v in now.items()}))


if __name__ == "__main__":
    main()
