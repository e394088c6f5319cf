"""A trained model's table changed by removing a common direction, or by weighting each piece
by its frequency, scored on the dev suite (benchmarks/RESULTS.md#common-direction).

The mean of ``E[id] P - c`` over a sentence's pieces is ``mean(E[id]) P - c``, so centering
sentence vectors (``c``: the mean vector of training sentences) and projecting out their top
principal directions (``P = I - U^T U``) is a change of the table: free at inference and kept
by every export. This measures what it would do to the dev suite (STS 2017 en-en, STS-B dev,
held-back retrieval; psp_core/evaluation/dev_suite.py); test sets are not read.

Scaling each row by ``a / (a + p(id))`` (``p``: the piece's frequency in the training file) is
the smooth inverse frequency weighting of Arora et al. (2017), also a change of the table: a
sentence's cosine to another does not depend on the mean's ``1/n``.

    .venv/bin/python benchmarks/common_direction.py --root runs/fresh_multi --code multi
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from psp_core import load_model  # noqa: E402
from psp_core.evaluation.dev_suite import dev_mean  # noqa: E402
from psp_core.inference.model import PSPModel  # noqa: E402
from psp_core.training.training_file import TrainingFile  # noqa: E402


def sample_vectors(model: PSPModel, data: Path, rows: int, group: int | None = None):
    """Sentence vectors (both sides) of the training pairs in 10 spans of ``rows`` pairs spread
    over the file, only those of ``group`` when given (a mixed file's pairs are shuffled, so
    each span holds the group's share)."""
    vectors = []
    with TrainingFile(data) as file:
        for start in np.linspace(0, len(file) - rows, 10).astype(int):
            stop = int(start) + rows
            mine = slice(None) if group is None else file.read_groups(start, stop) == group
            for side in file.read(int(start), stop):
                vectors.append(model.embed_ids(side.ids, side.offsets)[mine])
    return np.concatenate(vectors)


def piece_frequencies(data: Path, vocab_size: int, chunk: int = 50_000) -> np.ndarray:
    """Each piece's share of the ids of the training file (both sides)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    with TrainingFile(data) as file:
        for start in range(0, len(file), chunk):
            for side in file.read(start, min(len(file), start + chunk)):
                counts += np.bincount(np.asarray(side.ids), minlength=vocab_size)
    return counts / counts.sum()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "fresh_multi")
    parser.add_argument("--code", default="multi")
    parser.add_argument("--model", type=Path, help="default: <root>/<code>/psp_model/model")
    parser.add_argument("--removed", default="1,2,5", help="numbers of directions to remove")
    parser.add_argument(
        "--weights", default="0.01,0.001", help="values of a for the rows scaled by a/(a+p)"
    )
    parser.add_argument("--rows", type=int, default=2000, help="pairs per span sampled")
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        "a quick de model and training file built from the bitext (--root and --code unused), "
        "the first 100 lines of the dev sets, 1 direction removed, 1 weight",
    )
    args = parser.parse_args()
    if args.quick:
        if _common.require_data(args.data_dir, "bitext", "en-de") is None:
            return 0
        args.root, args.code = _common.quick_root(args.data_dir, args.results_dir), "de"
        args.removed, args.weights, args.rows = "1", "0.01", 100
    model_dir = args.model or args.root / args.code / "psp_model" / "model"
    data = args.root / args.code / "training_data" / "train.h5"
    eval_dir = _common.eval_dir_for(args)
    if not eval_dir.is_dir() or not data.is_file() or not model_dir.is_dir():
        print(json.dumps({"skipped": f"{eval_dir}, {data} or {model_dir} is absent"}))
        return 0
    suite, _ = _common.dev_suite_for(args.root, args.code, eval_dir)
    model = load_model(model_dir)
    table = model.weight.numpy().copy()
    rows = []

    def score(name: str, changed: np.ndarray) -> None:
        variant = PSPModel(model.tokenizer, changed.astype(np.float32), model.config)
        scores = suite.scores(variant, digits=None)
        rows.append(
            {"table": name, "dev_mean": round(dev_mean(scores, digits=None), 4)}
            | {key: round(value, 2) for key, value in scores.items()}
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    def remove(label: str, vectors: np.ndarray, counts: list[int]) -> None:
        mean = vectors.mean(0)
        _, _, directions = np.linalg.svd(vectors[::4] - mean, full_matrices=False)
        centered = table - mean
        for k in counts:
            top = directions[:k]
            name = f"centered on {label}" + (f", top {k} removed" if k else "")
            score(name, centered - centered @ top.T @ top if k else centered)

    score("unchanged", table)
    counts = [0] + [int(x) for x in args.removed.split(",")]
    remove("every group's sentences", sample_vectors(model, data, args.rows), counts)
    if args.code == "multi":  # the first group of the multilingual file: English paraphrases
        remove("English sentences", sample_vectors(model, data, 10_000, group=0), [1])
    frequency = piece_frequencies(data, len(table))
    for a in [float(x) for x in args.weights.split(",") if x]:
        score(f"rows scaled by a/(a+p), a={a:g}", table * (a / (a + frequency))[:, None])
    print(json.dumps({"benchmark": "common_direction", "code": args.code, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
