"""How often do exported models (psp export) give psp_core's sentence embedding direction?

Trains a small model on the shared en-de bitext (sentencepiece unigram vocab 8k, dim 256, one
epoch), exports it to sentence-transformers and to model2vec, loads both offline and embeds
every sentence of the shared STS files (eval/sts/*/*.tsv and eval/sts17/*.tsv, both sides:
20,216 sentences in English, Arabic, Spanish and Turkish).
Prints one JSON object: per format the fraction of sentences whose exported vector has cosine
>= 0.9999 with psp_core's (goal: >= 99.5%), the worst few sentences with their piece counts,
and the fraction with exactly equal token ids (known pieces).

    python benchmarks/export_agreement.py [--data-dir ../shared/data] [--pairs N]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import _common  # noqa: E402
import numpy as np  # noqa: E402

from ops.training_data.packing import pack_pairs  # noqa: E402
from psp_core import Tokenizer, TrainConfig, load_model, train  # noqa: E402
from psp_core.models.export import export_model  # noqa: E402

THRESHOLD = 0.9999


def read_sentences(data_dir: Path) -> tuple[list[str], list[str]]:
    eval_dir = data_dir / "eval"
    files = sorted((eval_dir / "sts").glob("*/*.tsv")) + sorted((eval_dir / "sts17").glob("*.tsv"))
    sentences: list[str] = []
    for path in files:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 3:
                    sentences.extend(fields[1:])
    return sentences, [str(p.relative_to(data_dir)) for p in files]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (na == 0) & (nb == 0)
    result = np.einsum("ij,ij->i", a, b) / np.maximum(na * nb, 1e-300)
    result[both_zero] = 1.0  # no pieces in either: the same (zero) vector
    return result


def summary(cos: np.ndarray, sentences: list[str], model, worst: int) -> dict:
    order = np.argsort(cos, kind="stable")[:worst]
    raw = model.tokenizer.processor.Encode([sentences[i].lower() for i in order], out_type=int)
    unk = model.tokenizer.unk_id
    return {
        "sentences": len(sentences),
        "agree": int((cos >= THRESHOLD).sum()),
        "fraction_agree": round(float((cos >= THRESHOLD).mean()), 6),
        "min_cosine": float(cos.min()),
        "worst": [
            {
                "cosine": round(float(cos[i]), 6),
                "pieces": len(ids),
                "unknown_pieces": ids.count(unk),
                "chars": len(sentences[i]),
                "sentence": sentences[i][:200],
            }
            for i, ids in zip(order, raw, strict=True)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--worst", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=0, help="STS sentences used; 0: all")
    _common.add_quick_argument(
        parser,
        f"the quick sentencepiece model, {_common.QUICK_PAIRS:,} pairs, dim 32, "
        "1,000 STS sentences, 1 thread",
    )
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.vocab_size, args.dim = _common.QUICK_PAIRS, _common.QUICK_VOCAB_SIZE, 32
        args.sentences, args.threads = 1000, 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    if _common.require_data(args.data_dir, "eval", "sts") is None:
        return
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    args.results_dir.mkdir(parents=True, exist_ok=True)
    spm_path, spm_info = _common.spm_model(
        args.data_dir,
        args.results_dir,
        vocab_size=args.vocab_size,
        max_pairs=_common.QUICK_PAIRS if args.quick else None,
    )
    tokenizer = Tokenizer.from_file(spm_path)
    english, german = _common.read_bitext(args.data_dir, "de")
    pairs = [p for p in zip(english, german, strict=True) if p[0].strip() and p[1].strip()]
    random.Random(0).shuffle(pairs)
    pairs = pairs[: args.pairs]
    sentences, files = read_sentences(args.data_dir)
    sentences = sentences[: args.sentences or None]
    results: dict = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        data = work / "train.h5"
        pack_pairs(pairs, tokenizer, data, lang="de")
        started = time.perf_counter()
        config = TrainConfig(
            dim=args.dim, epochs=1, log_every=0, checkpoint_every=0, num_threads=args.threads
        )
        bundle = train(data, spm_path, work / "model", config).bundle
        train_seconds = time.perf_counter() - started
        model = load_model(bundle)
        psp = model.embed(sentences, batch_size=256)
        for fmt in ("sentence-transformers", "model2vec"):
            output = export_model(bundle, fmt, work / fmt)
            started = time.perf_counter()
            if fmt == "sentence-transformers":
                exported = SentenceTransformer(str(output), device="cpu", local_files_only=True)
                vectors = exported.encode(sentences, batch_size=256, convert_to_numpy=True)
            else:
                vectors = StaticModel.from_pretrained(output).encode(sentences, batch_size=256)
            embed_seconds = time.perf_counter() - started
            results[fmt] = summary(cosines(psp, vectors), sentences, model, args.worst)
            results[fmt]["embed_seconds"] = round(embed_seconds, 2)
        raw = model.tokenizer.processor.Encode([s.lower() for s in sentences], out_type=int)
        lengths = np.array([len(ids) for ids in raw])
    _common.emit(
        {
            "benchmark": "export_agreement",
            "machine": _common.machine_info(),
            "threshold": THRESHOLD,
            "files": files,
            "sentences": len(sentences),
            "sentences_over_100_pieces": int((lengths > 100).sum()),
            "sentences_with_unknown_pieces": int(sum(model.tokenizer.unk_id in ids for ids in raw)),
            "model": {
                "pairs": len(pairs),
                "dim": args.dim,
                "vocab_size": tokenizer.vocab_size,
                "epochs": 1,
                "train_seconds": round(train_seconds, 1),
                "spm": spm_info,
            },
            "formats": results,
        }
    )


if __name__ == "__main__":
    main()
