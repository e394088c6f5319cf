"""Text the vocabulary lacks: sentencepiece's byte fallback against unknown pieces, on the dev suite.

A text whose characters are all outside a vocabulary (emoji, a script the model never saw)
gets from sentencepiece only the bare word-boundary piece ``▁`` and unknown pieces. psp_core
gives it nothing to embed (a zero vector, as an empty text); a vocabulary trained with
``byte_fallback`` pieces such characters as their UTF-8 bytes instead, so every text has pieces.
For each language of ``--languages``, the language job (``psp_language_job``, the ``--profile``
profile, the shared data) runs twice in processes of their own, once per vocabulary
(``unknown``: the registry as shipped; ``bytes``: ``byte_fallback = true`` in its
``[defaults.sentencepiece]``), each in its own storage root under ``--root``. Each model is
scored on:

* the dev suite the pipeline scores (STS 2017 en-en, STS-B dev, the held-back pairs' retrieval
  error among them and their pool, :mod:`psp_core.evaluation.dev_suite`); test sets are not read;
* for the ``unknown`` vocabulary, the same dev suite with the rule before this choice (such a
  text kept the boundary piece's vector), and how many held-back and pool sentences have
  nothing to embed;
* texts outside the language (``OUTSIDE``): how many have nothing to embed, and how many
  distinct directions the others get (cosine < 0.9999 between any two);
* speed: ``embed`` of the language's held-back and pool sentences, once, by a freshly loaded
  model (sentences/s, the median of 3), and the vocabulary's size.

Prints one JSON object; logs go to stderr.

    .venv/bin/python benchmarks/unknown_text.py --languages de,zh,ar   # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

VARIANTS = {"unknown": "", "bytes": "byte_fallback = true\n"}
#: texts outside every shipped language's vocabulary, or most of them
OUTSIDE = [
    "👍",
    "🎉🎉",
    "😀 😃 😄",
    "日本語のテキスト",
    "한국어 문장입니다",
    "ελληνικά κείμενα",
    "עברית",
    "हिन्दी वाक्य",
    "ภาษาไทย",
    "?",
    "¿¡",
    "♠♣♥♦",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "unknown_text")
    parser.add_argument("--languages", default="de,zh,ar")
    parser.add_argument("--profile", default="demo")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="(one variant's process)")
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        "de only, its first pairs, the smoke profile, the unknown-pieces vocabulary only (the one "
        "whose scoring also runs the rule before)",
    )
    return parser.parse_args()


def registry_for(args: argparse.Namespace, variant: str) -> Path:
    """The offline registry (a slice of it with --quick), with ``variant``'s sentencepiece
    setting, written under the variant's root."""
    if args.quick:
        source = _common.quick_registry(args.data_dir, args.results_dir, ("de",))
        text = source.read_text(encoding="utf-8")
    else:
        text = _common.offline_registry_text(args.data_dir)
    marker = "[defaults.sentencepiece]\n"
    assert marker in text
    text = text.replace(marker, marker + VARIANTS[variant], 1)
    path = args.root / variant / "languages.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run_variant(args: argparse.Namespace, variant: str) -> None:
    """(In the variant's own process) the language job for each language."""
    from dagster import DagsterInstance, materialize

    from assets.settings.resources import ComputeResource, default_resources
    from pipelines.definitions import defs

    resources = default_resources()
    if args.quick:
        resources["compute"] = ComputeResource(workers=1)
    keys = defs.resolve_job_def("psp_language_job").asset_layer.executable_asset_keys
    assets = [defs.get_assets_def(key) for key in keys]
    instance = DagsterInstance.ephemeral()
    for code in args.languages.split(","):
        started = time.perf_counter()
        result = materialize(assets, partition_key=code, resources=resources, instance=instance)
        assert result.success, (variant, code)
        print(f"{variant} {code}: {time.perf_counter() - started:.0f} s", file=sys.stderr)


def directions(vectors) -> int:
    """How many distinct directions (cosine < 0.9999 to every one before) ``vectors`` hold."""
    import numpy as np

    kept: list = []
    for vector in vectors / np.linalg.norm(vectors, axis=1, keepdims=True):
        if all(float(vector @ other) < 0.9999 for other in kept):
            kept.append(vector)
    return len(kept)


def speed(bundle: Path, sentences: list[str]) -> float:
    """``embed`` of ``sentences`` once by a freshly loaded model: sentences/s, median of 3."""
    from psp_core import load_model

    rates = []
    for _ in range(3):
        model = load_model(bundle)
        started = time.perf_counter()
        model.embed(sentences)
        rates.append(len(sentences) / (time.perf_counter() - started))
    return round(statistics.median(rates))


def score(root: Path, code: str, eval_dir: Path, variant: str) -> dict:
    from psp_core import load_model

    suite, _ = _common.dev_suite_for(root, code, eval_dir)
    bundle = root / code / "psp_model" / "model"
    model = load_model(bundle)
    row: dict = {"vocab_size": model.vocab_size, "dev": suite.scores(model)}
    held = [t for side in suite.pairs.get(code, ([], [])) for t in side]
    pool = [t for side in suite.pools.get(code, ([], [])) for t in side]
    vectors = model.embed(held + pool)
    row["held_back_and_pool_with_nothing_to_embed"] = int((~vectors.any(axis=1)).sum())
    outside = model.embed(OUTSIDE)
    empty = ~outside.any(axis=1)
    row["outside_texts"] = {
        "n": len(OUTSIDE),
        "nothing_to_embed": int(empty.sum()),
        "directions_of_the_others": directions(outside[~empty]) if (~empty).any() else 0,
    }
    if variant == "unknown":  # the rule before: the boundary piece's vector
        before = load_model(bundle)
        before.tokenizer.boundary_id = None
        if before._word_vectors is not None:
            before._word_vectors.boundary_id = -1
        row["dev_with_the_boundary_vector"] = suite.scores(before)
        shared = before.embed(OUTSIDE)
        row["outside_texts_with_the_boundary_vector"] = directions(shared[shared.any(axis=1)])
    row["embed_sentences_per_s"] = speed(bundle, held + pool)
    row["embed_sentences"] = len(held + pool)
    return row


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    if args.quick:
        args.root, args.languages, args.profile = args.results_dir / "unknown-text", "de", "smoke"
    args.root = args.root.resolve()
    eval_dir = _common.eval_dir_for(args).resolve()
    if args.variant:
        run_variant(args, args.variant)
        return 0
    out: dict = {"machine": _common.machine_info(), "profile": args.profile, "languages": {}}
    for variant in ["unknown"] if args.quick else VARIANTS:
        root = args.root / variant
        env = os.environ | {
            "PSP_LANGUAGES": str(registry_for(args, variant)),
            "PSP_PROFILE": args.profile,
            "PSP_STORAGE_ROOT": str(root),
            "PSP_EVAL_DIR": str(eval_dir),
            "PSP_PARANMT_URL": str(args.data_dir / "paraphrase" / "paranmt-format-sample.txt.gz"),
        }
        argv = [sys.executable, __file__, "--variant", variant, "--root", str(args.root)]
        argv += ["--languages", args.languages, "--data-dir", str(args.data_dir)]
        argv += ["--results-dir", str(args.results_dir)] + (["--quick"] if args.quick else [])
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=sys.stderr)
        out[f"{variant}_jobs_seconds"] = round(time.perf_counter() - started, 1)
        for code in args.languages.split(","):
            row = score(root, code, eval_dir, variant)
            out["languages"].setdefault(code, {})[variant] = row
            print(json.dumps({code: {variant: row}}), file=sys.stderr, flush=True)
    _common.emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
