"""Clustered mining against exact mining on one mega-batch (table in
benchmarks/RESULTS.md#mining-clusters).

Embeds 12,800 pairs of a training file with a trained model and finds every sentence's hardest
negative twice: by the trainer's exact mining (``mine_hard_negatives`` in plain float32, both
sides, its exclusions by sentence hash), and by comparing each anchor only with the candidates
of its ``probed`` nearest clusters (spherical k-means on the candidates), under the same
exclusions. Reports the time of each and the share of anchors whose negative is the exact one,
or within 0.01 cosine of it: the agreement a cheaper mining must reach to replace exact mining (>= 95%).

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
from psp_core.training.negative_mining import mine_hard_negatives, sentence_hashes  # noqa: E402
from psp_core.training.training_file import TrainingFile  # noqa: E402


def kmeans(vectors: torch.Tensor, clusters: int, rounds: int = 5, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    centroids = vectors[torch.randperm(len(vectors), generator=generator)[:clusters]].clone()
    for _ in range(rounds):
        nearest = (vectors @ centroids.T).argmax(1)
        centroids = F.normalize(torch.zeros_like(centroids).index_add_(0, nearest, vectors), dim=1)
    return centroids


def clustered(anchors, candidates, anchor_keys, candidate_hash, clusters: int, probed: int):
    """Each anchor's best candidate among its cluster's ``probed`` nearest clusters, leaving
    out the candidates whose hash equals any of the anchor's ``anchor_keys`` (the trainer's
    rule: not the anchor itself, not its partner, nor a copy of either)."""
    centroids = kmeans(candidates, clusters)
    anchor_cluster = (anchors @ centroids.T).argmax(1)
    candidate_cluster = (candidates @ centroids.T).argmax(1)
    near = (centroids @ centroids.T).topk(probed, dim=1).indices
    members = [torch.nonzero(candidate_cluster == c).flatten() for c in range(clusters)]
    best = torch.full((len(anchors),), -2.0)
    index = torch.zeros(len(anchors), dtype=torch.long)
    for c in range(clusters):
        rows = torch.nonzero(anchor_cluster == c).flatten()
        if len(rows) == 0:
            continue
        columns = torch.cat([members[k] for k in near[c].tolist()])
        scores = anchors[rows] @ candidates[columns].T
        column_hash = candidate_hash[columns].unsqueeze(0)
        for keys in anchor_keys:
            scores[keys[rows].unsqueeze(1) == column_hash] = -2.0
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
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        "a quick de model and training file built from the bitext (--root and --code unused), "
        "512 pairs, clusters:probed 8:2 and 16:4",
    )
    args = parser.parse_args()
    if args.quick:
        if _common.require_data(args.data_dir, "bitext", "en-de") is None:
            return 0
        args.root, args.code = _common.quick_root(args.data_dir, args.results_dir), "de"
        args.pairs, args.settings = 512, "8:2,16:4"
    model_dir = args.root / args.code / "psp_model" / "model"
    data = args.root / args.code / "training_data" / "train.h5"
    if not data.is_file() or not model_dir.is_dir():
        print(json.dumps({"skipped": f"{data} or {model_dir} is absent"}))
        return 0
    model = load_model(model_dir)
    with TrainingFile(data) as file:
        start = min(args.start, len(file) - args.pairs)
        sides = file.read(start, start + args.pairs)
    source, target = (
        F.normalize(torch.from_numpy(model.embed_ids(side.ids, side.offsets)), dim=1)
        for side in sides
    )
    source_hash, target_hash = (
        torch.from_numpy(sentence_hashes(side.ids, side.offsets)) for side in sides
    )
    started = time.perf_counter()
    exact = mine_hard_negatives(source, target, source_hash, target_hash, screen=False)
    result = {"pairs": len(source), "exact_s": round(time.perf_counter() - started, 3)}
    # each side: anchors, their candidates, the hashes a candidate must not equal, the exact
    # negatives (mining.py's rule for bitext: a source's negative is a target, and back)
    directions = (
        (source, target, (source_hash, target_hash), target_hash, exact.for_source),
        (target, source, (target_hash, source_hash), source_hash, exact.for_target),
    )
    result["rows"] = []
    for setting in args.settings.split(","):
        clusters, probed = (int(x) for x in setting.split(":"))
        same = within = 0
        largest = 0.0
        started = time.perf_counter()
        found = [clustered(a, c, keys, h, clusters, probed) for a, c, keys, h, _ in directions]
        seconds = time.perf_counter() - started
        for (anchors, candidates, _, _, exact_index), (best, index) in zip(
            directions, found, strict=True
        ):
            gap = (anchors * candidates[exact_index]).sum(1) - best
            same += int((index == exact_index).sum())
            within += int((gap <= 0.01).sum())
            largest = max(largest, float(gap.max()))
        anchors_total = 2 * len(source)
        result["rows"].append(
            {
                "clusters": clusters,
                "probed": probed,
                "seconds": round(seconds, 3),
                "same_negative": round(same / anchors_total, 4),
                "within_0.01": round(within / anchors_total, 4),
                "largest_gap": round(largest, 3),
            }
        )
    print(json.dumps({"benchmark": "mining_clusters", "machine": _common.machine_info()} | result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
