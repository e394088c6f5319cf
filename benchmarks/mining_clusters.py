"""Clustered mining against exact mining on one mega-batch (issue 29 part 2; table in
benchmarks/README.md, "A way the issue's own rule leaves open").

Embeds 12,800 pairs of a training file with a trained model, finds each source sentence's
hardest target exactly (the pair's own target excluded), then again comparing each anchor only
with the targets of its ``probed`` nearest clusters (spherical k-means on the targets), and
reports the time and the share of anchors whose negative is the exact one, or within 0.01
cosine of it: the agreement issue 29 asks of a cheaper mining (>= 95%).

    .venv/bin/python benchmarks/mining_clusters.py --root runs/fresh_multi --code multi
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from psp_core import load_model  # noqa: E402
from psp_core.training_file import TrainingFile  # noqa: E402


def exact(anchors: torch.Tensor, targets: torch.Tensor, block: int = 512):
    best = torch.empty(len(anchors))
    index = torch.empty(len(anchors), dtype=torch.long)
    for i in range(0, len(anchors), block):
        scores = anchors[i : i + block] @ targets.T
        scores[torch.arange(len(scores)), torch.arange(i, i + len(scores))] = -2.0
        best[i : i + block], index[i : i + block] = scores.max(1)
    return best, index


def kmeans(vectors: torch.Tensor, clusters: int, rounds: int = 5, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    centroids = vectors[torch.randperm(len(vectors), generator=generator)[:clusters]].clone()
    for _ in range(rounds):
        nearest = (vectors @ centroids.T).argmax(1)
        centroids = F.normalize(torch.zeros_like(centroids).index_add_(0, nearest, vectors), dim=1)
    return centroids


def clustered(anchors: torch.Tensor, targets: torch.Tensor, clusters: int, probed: int):
    centroids = kmeans(targets, clusters)
    anchor_cluster = (anchors @ centroids.T).argmax(1)
    target_cluster = (targets @ centroids.T).argmax(1)
    near = (centroids @ centroids.T).topk(probed, dim=1).indices
    members = [torch.nonzero(target_cluster == c).flatten() for c in range(clusters)]
    best = torch.full((len(anchors),), -2.0)
    index = torch.zeros(len(anchors), dtype=torch.long)
    for c in range(clusters):
        rows = torch.nonzero(anchor_cluster == c).flatten()
        if len(rows) == 0:
            continue
        columns = torch.cat([members[k] for k in near[c].tolist()])
        scores = anchors[rows] @ targets[columns].T
        scores[rows.unsqueeze(1) == columns.unsqueeze(0)] = -2.0
        found, where = scores.max(1)
        best[rows], index[rows] = found, columns[where]
    return best, index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "fresh_multi")
    parser.add_argument("--code", default="multi")
    parser.add_argument("--pairs", type=int, default=12_800)
    parser.add_argument("--start", type=int, default=100_000, help="first pair of the file")
    parser.add_argument("--settings", default="64:4,64:8,128:8,128:16,256:16")
    args = parser.parse_args()
    model_dir = args.root / args.code / "psp_model" / "model"
    data = args.root / args.code / "training_data" / "train.h5"
    if not data.is_file() or not model_dir.is_dir():
        print(json.dumps({"skipped": f"{data} or {model_dir} is absent"}))
        return 0
    torch.set_num_threads(_common.machine_info()["nproc"])
    model = load_model(model_dir)
    with TrainingFile(data) as file:
        start = min(args.start, len(file) - args.pairs)
        source, target = file.read(start, start + args.pairs)
    anchors = F.normalize(torch.from_numpy(model.embed_ids(source.ids, source.offsets)), dim=1)
    targets = F.normalize(torch.from_numpy(model.embed_ids(target.ids, target.offsets)), dim=1)
    started = time.perf_counter()
    exact_best, exact_index = exact(anchors, targets)
    result = {"exact_s": round(time.perf_counter() - started, 3), "rows": []}
    for setting in args.settings.split(","):
        clusters, probed = (int(x) for x in setting.split(":"))
        started = time.perf_counter()
        best, index = clustered(anchors, targets, clusters, probed)
        gap = exact_best - best
        result["rows"].append(
            {
                "clusters": clusters,
                "probed": probed,
                "seconds": round(time.perf_counter() - started, 3),
                "same_negative": round((index == exact_index).float().mean().item(), 4),
                "within_0.01": round((gap <= 0.01).float().mean().item(), 4),
                "largest_gap": round(gap.max().item(), 3),
            }
        )
    print(json.dumps({"benchmark": "mining_clusters", "machine": _common.machine_info()} | result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
