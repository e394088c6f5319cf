"""Training and embedding speed on one GPU at the paper's settings (the CUDA path).

* **training**: pairs/s of the training step itself (``psp_core.training.steps.
  train_megabatch``: mining the mega-batch's hard negatives, then one optimizer step per
  mini-batch) at the paper's settings: dim 1024, vocabulary 50,000, batch 128, mega-batch 100
  (12,800 pairs mined at once), sparse Adam as the default; ``--optimizer dense`` for the
  paper's Adam;
* **embedding**: sentences/s of the averaging alone (``PSPModel.embed_ids``-style
  ``embedding_bag`` over ids already on the device, batches of ``--embed-batch``), excluding
  tokenization, as the goal states it.

The data are synthetic (the device machine has no corpora): Zipf-distributed piece ids, 5-30
pieces per sentence, each target sharing ~70% of its source's pieces. Goals on one H100:
training >= 100,000 pairs/s (the paper's English model, 25.85M pairs x 25 epochs, in under 2
hours), embedding >= 1,000,000 sentences/s.

    python benchmarks/gpu_speed.py [--device cuda] [--megabatches 6] [--quick]

Runs on CPU too (``--device cpu``), to compare. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _common
import numpy as np
import torch
import torch.nn.functional as F

from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training.config import TrainConfig
from psp_core.training.data import PairBatch
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.optim import build_optimizer
from psp_core.training.steps import StepSettings, train_megabatch

TRAINING_GOAL = 100_000
EMBEDDING_GOAL = 1_000_000


def zipf_ids(rng: np.random.Generator, vocab_size: int, n: int) -> np.ndarray:
    """``n`` piece ids, frequent ones most often as in real text (id 0, unknown, unused)."""
    return (rng.zipf(1.1, n) % (vocab_size - 1) + 1).astype(np.int64)


def id_lists(rng: np.random.Generator, vocab_size: int, n: int) -> list[list[int]]:
    lengths = rng.integers(5, 31, n)
    flat = zipf_ids(rng, vocab_size, int(lengths.sum()))
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [flat[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def pair_batch(rng: np.random.Generator, vocab_size: int, n: int) -> PairBatch:
    sources = id_lists(rng, vocab_size, n)
    targets = []
    for ids in sources:
        ids = np.array(ids)
        replace = rng.random(len(ids)) < 0.3
        ids[replace] = zipf_ids(rng, vocab_size, int(replace.sum()))
        targets.append(ids.tolist())
    return PairBatch(flatten_id_lists(sources), flatten_id_lists(targets))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_speed(args: argparse.Namespace, device: torch.device) -> dict:
    rng = np.random.default_rng(0)
    model = MeanEmbeddingEncoder(args.vocab_size, args.dim, sparse=args.optimizer == "sparse")
    model.reset_parameters(torch.Generator().manual_seed(1))
    model.to(device)
    optimizer = build_optimizer(model, args.optimizer, 0.001)
    config = TrainConfig(batch_size=args.batch_size)  # the paper's margin, clip and mining
    settings = StepSettings.from_config(config, device=device, negatives_from="opposite")
    pairs = args.batch_size * args.megabatch
    batches = [pair_batch(rng, args.vocab_size, pairs) for _ in range(args.megabatches + 1)]
    train_megabatch(model, optimizer, batches[0], settings, first_step=0)  # warm-up
    synchronize(device)
    times = []
    for step, mega in enumerate(batches[1:]):
        started = time.perf_counter()
        train_megabatch(model, optimizer, mega, settings, first_step=step * args.megabatch)
        synchronize(device)
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    return {
        "pairs_per_megabatch": pairs,
        "megabatches": len(times),
        "seconds_per_megabatch": [round(t, 4) for t in times],
        "pairs_per_s_median": round(pairs / median),
        "goal_pairs_per_s": TRAINING_GOAL,
        "paper_english_25_epochs_hours": round(25.85e6 * 25 / (pairs / median) / 3600, 2),
    }


def embedding_speed(args: argparse.Namespace, device: torch.device) -> dict:
    rng = np.random.default_rng(1)
    table = torch.randn(args.vocab_size, args.dim, device=device)
    batch = flatten_id_lists(id_lists(rng, args.vocab_size, args.embed_batch))
    ids = torch.from_numpy(batch.ids).to(device)
    offsets = torch.from_numpy(batch.offsets[:-1]).to(device)
    with torch.inference_mode():
        for _ in range(3):
            F.embedding_bag(ids, table, offsets, mode="mean")
        synchronize(device)
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in range(args.embed_rounds):
                vectors = F.embedding_bag(ids, table, offsets, mode="mean")
            synchronize(device)
            times.append(time.perf_counter() - started)
    sentences = args.embed_batch * args.embed_rounds
    return {
        "batch": args.embed_batch,
        "mean_pieces": round(len(batch.ids) / args.embed_batch, 1),
        "sentences_per_s_median": round(sentences / statistics.median(times)),
        "goal_sentences_per_s": EMBEDDING_GOAL,
        "output": list(vectors.shape),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--vocab-size", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--megabatch", type=int, default=100, help="mini-batches per mega-batch")
    parser.add_argument("--megabatches", type=int, default=6, help="measured mega-batches")
    parser.add_argument("--optimizer", choices=("sparse", "dense"), default="sparse")
    parser.add_argument("--embed-batch", type=int, default=8192)
    parser.add_argument("--embed-rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    # (like every benchmark; the data are synthetic and nothing is cached here)
    _common.add_data_arguments(parser)
    _common.add_quick_argument(parser, "mega-batch 4, 2 mega-batches, 2 embedding rounds")
    args = parser.parse_args()
    if args.quick:
        args.megabatch, args.megabatches, args.embed_rounds, args.repeats = 4, 2, 2, 2
    _common.setup_logging()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        _common.emit({"skipped": "no CUDA device: run on a GPU machine, or pass --device cpu"})
        return
    result = {
        "benchmark": "gpu_speed",
        "machine": _common.machine_info(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "settings": {k: getattr(args, k) for k in ("dim", "vocab_size", "batch_size", "megabatch")}
        | {"optimizer": args.optimizer},
        "training": training_speed(args, device),
        "embedding": embedding_speed(args, device),
    }
    _common.emit(result)


if __name__ == "__main__":
    main()
