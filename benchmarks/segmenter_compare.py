"""Chinese segmentation: jieba (Python) against rjieba (jieba-rs, Rust), on the shared zh bitext.

* **agreement**: on every zh sentence of ../shared/data/bitext/en-zh (lowercased, as the
  pipeline segments), the share of sentences both segment identically, and the word-boundary
  F1 of rjieba against jieba;
* **speed, 1 thread**: segmentation alone, and ``PSPModel.embed`` (lowercase, segment,
  sentencepiece, mean) with a sentencepiece model trained on the segmented text (vocab
  ``--vocab-size``) and a random [vocab, 1024] table: the speed does not depend on the values;
* **quality** (``--quality``): the zh language job with the demo profile once per segmenter
  (the offline registry, its zh pre-tokenizer switched), and the evaluation each model gets
  (English STS 2012-2014, STS-B; the shared data has no Tatoeba cmn and no zh STS track).

    python benchmarks/segmenter_compare.py [--sentences 20000] [--quality]

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEGMENTERS = ("jieba", "rjieba")
#: the zh pre-tokenizer line of the offline registry (its value is group 2)
ZH_PRETOKENIZER = re.compile(r'(\[languages\.zh\][^\[]*?pretokenizer = )("[^"]*")')


def boundaries(tokens: list[str]) -> set[int]:
    """The character offsets where a word ends."""
    ends, position = set(), 0
    for token in tokens:
        position += len(token)
        ends.add(position)
    return ends


def agreement(sentences: list[str]) -> dict:
    import jieba
    import rjieba

    same, true_positive, jieba_total, rjieba_total = 0, 0, 0, 0
    examples = []
    for text in sentences:
        a = [t for t in jieba.cut(text) if not t.isspace()]
        b = [t for t in rjieba.cut(text) if not t.isspace()]
        if a == b:
            same += 1
        elif len(examples) < 5:
            examples.append({"jieba": " ".join(a), "rjieba": " ".join(b)})
        ba, bb = boundaries(a), boundaries(b)
        true_positive += len(ba & bb)
        jieba_total, rjieba_total = jieba_total + len(ba), rjieba_total + len(bb)
    precision, recall = true_positive / rjieba_total, true_positive / jieba_total
    return {
        "sentences": len(sentences),
        "identical_share": round(same / len(sentences), 5),
        "boundary_f1": round(2 * precision * recall / (precision + recall), 5),
        "examples_of_differences": examples,
    }


def rate(function, items: list, repeats: int) -> dict:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function(items)
        times.append(time.perf_counter() - started)
    return {
        "median_per_s": round(len(items) / statistics.median(times)),
        "best_per_s": round(len(items) / min(times)),
    }


def speed(sentences: list[str], vocab_size: int, repeats: int, work: Path) -> dict:
    import torch

    from ops.training_data.sentencepiece_model import train_sentencepiece
    from psp_core import PSPModel, Tokenizer
    from psp_core.models.bundle import BundleConfig
    from psp_core.tokenization.tokenizer import make_pretokenizer

    torch.set_num_threads(1)
    results = {}
    for name in SEGMENTERS:
        segment = make_pretokenizer(name)
        segment("预热")  # loads the dictionary: not part of the rate
        lowered = [s.lower() for s in sentences]
        segmentation = rate(lambda items, f=segment: [f(s) for s in items], lowered, repeats)
        model_path = work / f"{name}.model"
        train_sentencepiece((segment(s) for s in lowered), model_path, vocab_size=vocab_size)
        tokenizer = Tokenizer.from_file(model_path, pretokenizer=name, num_threads=1)
        config = BundleConfig(
            dim=1024, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256
        )
        table = np.random.default_rng(0).standard_normal((tokenizer.vocab_size, 1024))
        model = PSPModel(tokenizer, table.astype(np.float32), config)
        model.embed(sentences[:100])
        embed = rate(lambda items, m=model: m.embed(items, batch_size=64), sentences, repeats)
        results[name] = {"segment_only": segmentation, "embed": embed}
        _common.log.info("%s: %s", name, results[name])
    return results


def quality(args: argparse.Namespace) -> dict:
    """The zh demo job once per segmenter; each model's evaluation."""
    registry_text = (ROOT / "configs" / "languages-shared-data.toml").read_text()
    results = {}
    for name in SEGMENTERS:
        with tempfile.TemporaryDirectory(prefix=f"segmenter-{name}-") as work:
            work = Path(work)
            registry = work / "languages.toml"
            if ZH_PRETOKENIZER.search(registry_text) is None:
                raise SystemExit("the registry's [languages.zh] has no pretokenizer line to switch")
            text = ZH_PRETOKENIZER.sub(rf'\g<1>"{name}"', registry_text, count=1)
            registry.write_text(text.replace('"../shared/data', f'"{args.data_dir}'))
            env = dict(os.environ)
            env.update(
                PSP_LANGUAGES=str(registry),
                PSP_STORAGE_ROOT=str(work / "storage"),
                PSP_EVAL_DIR=str(args.data_dir / "eval"),
                PSP_PROFILE="demo",
                DAGSTER_HOME=str(work),
            )
            command = [str(Path(sys.executable).with_name("dagster")), "job", "execute"]
            command += ["-m", "pipelines.definitions", "-j", "psp_language_job"]
            command += ["--tags", json.dumps({"dagster/partition": "zh"})]
            started = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"zh job with {name} failed:\n{done.stdout[-3000:]}")
            summary = json.loads(
                (work / "storage" / "zh" / "model_evaluation" / "results.json").read_text()
            )
            results[name] = {
                "job_s": round(time.perf_counter() - started, 1),
                "sts_years": {
                    y: round(v["pearson"], 2) for y, v in summary["sts"]["years"].items()
                },
                "sts_mean": round(summary["sts"]["mean"]["pearson"], 2),
                "stsb": {k: round(v["pearson"], 2) for k, v in summary["stsb"].items()},
                "sts17": {k: round(v["pearson"], 2) for k, v in summary["sts17"].items()},
            }
            _common.log.info("%s: %s", name, results[name])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--sentences", type=int, default=20_000, help="for the speed figures")
    parser.add_argument(
        "--agreement-sentences", type=int, default=0, help="for the agreement; 0: all"
    )
    parser.add_argument("--vocab-size", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quality", action="store_true", help="train a zh model per segmenter")
    _common.add_quick_argument(
        parser, "1,000 sentences for the agreement, 300 for speed, vocabulary 1,000, 1 repeat"
    )
    args = parser.parse_args()
    if args.quick:
        args.agreement_sentences, args.sentences = 1000, 300
        args.vocab_size, args.repeats = _common.QUICK_VOCAB_SIZE, 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-zh") is None:
        return
    args.data_dir = args.data_dir.resolve()
    _, chinese = _common.read_bitext(args.data_dir, "zh")
    chinese = [s for s in chinese if s.strip()]
    result = {
        "benchmark": "segmenter_compare",
        "machine": _common.machine_info(),
        "agreement": agreement([s.lower() for s in chinese[: args.agreement_sentences or None]]),
    }
    with tempfile.TemporaryDirectory() as work:
        result["speed_1_thread"] = speed(
            chinese[: args.sentences], args.vocab_size, args.repeats, Path(work)
        )
    if args.quality:
        result["quality_demo_profile"] = quality(args)
    _common.emit(result)


if __name__ == "__main__":
    main()
