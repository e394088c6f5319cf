"""The multilingual model on the shared data: temperature sampling's alpha, model selection,
the per-language models beside it, a held-back zh-en check and
training throughput against a one-language model with the same vocabulary and dimension.

Everything runs through the real Dagster assets (``dagster.materialize``), demo profile, in a
storage root of its own (default ``runs/bench_multi``). The registry is the shared-data one,
except that zh reads a copy of the shared zh bitext without every ``--hold-every``-th pair:
those pairs (never trained on by either model) are the zh-en check, scored like Tatoeba (error
% of nearest-neighbour retrieval, cosine and margin, both directions averaged).

    python benchmarks/multi_model.py                       # the table in benchmarks/RESULTS.md#multi-model
    python benchmarks/multi_model.py --variants 0.5 --skip-languages

Prints one JSON object (and writes it to ``--output`` if given).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

SHARED = _common.DEFAULT_DATA_DIR


def held_back_zh(
    directory: Path, every: int, shared: Path = SHARED, limit: int | None = None
) -> tuple[list[str], list[str]]:
    """Write the shared en-zh bitext (its first ``limit`` pairs when given) without every
    ``every``-th pair to ``directory``; return the held-back (English, Chinese) sentences."""
    english, chinese = _common.read_bitext(shared, "zh", limit)
    directory.mkdir(parents=True, exist_ok=True)
    kept = [i for i in range(len(english)) if i % every != every - 1]
    held = [i for i in range(len(english)) if i % every == every - 1]
    for name, lines in (("en", english), ("zh", chinese)):
        with gzip.open(directory / f"combined.{name}.gz", "wt", encoding="utf-8") as handle:
            handle.write("\n".join(lines[i] for i in kept) + "\n")
    return [english[i] for i in held], [chinese[i] for i in held]


def registry_file(
    root: Path,
    zh_dir: Path,
    shared: Path = SHARED,
    source: Path = _common.OFFLINE_REGISTRY,
    languages: list[str] | None = None,
) -> Path:
    """The registry ``source`` (its bitext under ``shared``) with zh read from ``zh_dir``,
    every variant promoted, and the multilingual model of ``languages`` when given."""
    text = _common.offline_registry_text(shared, {"zh": zh_dir}, source)
    if languages:
        text = text.replace("[multi]\n", f"[multi]\nlanguages = {json.dumps(languages)}\n", 1)
    # every variant is promoted (the gate would keep the first one trained and evaluate it
    # again): this compares variants, it is not a weekly retrain
    text = text.replace(
        "[defaults.promotion]\ntolerance = 1.0", "[defaults.promotion]\ntolerance = 1000.0"
    )
    assert "tolerance = 1000.0" in text
    path = root / "languages.toml"
    path.write_text(text)
    return path


def zh_check(bundle: Path, english: list[str], chinese: list[str]) -> dict:
    from psp_core import load_model
    from psp_core.evaluation import tatoeba_errors

    model = load_model(bundle)
    score = tatoeba_errors(model.embed(chinese), model.embed(english))
    return {
        "n": score.n,
        "cosine_error": round((score.cosine_xx_en + score.cosine_en_xx) / 2, 2),
        "margin_error": round((score.margin_xx_en + score.margin_en_xx) / 2, 2),
    }


def dev_of(root: Path, code: str) -> dict:
    """The dev suite of the newest model version of ``code`` (psp_core/evaluation/dev_suite.py:
    STS 2017 en-en, STS-B dev, and each language's held-back pairs, which share no sentence
    with training), and ``dev_mean``: the mean of the two STS scores and of the languages'
    mean held-back accuracy (the rule the multilingual defaults are decided by)."""
    from psp_core.models.registry import ModelRegistry

    versions = ModelRegistry(root / code / "psp_model").versions()
    if not versions:
        return {}
    from psp_core.evaluation.dev_suite import dev_mean

    scores = dict(versions[-1].dev_scores)  # (oldest first)
    if (mean := dev_mean(scores)) is not None:
        scores["dev_mean"] = mean
    return scores


def summary(root: Path, code: str) -> dict:
    results = json.loads((root / code / "model_evaluation" / "results.json").read_text())
    model = json.loads((root / code / "psp_model" / "manifest.json").read_text())["record"]
    history = model["history"]
    return {
        "sts_mean": round(results["sts"]["mean"]["pearson"], 1) if results["sts"]["mean"] else None,
        "stsb_dev": round(
            (results.get("stsb", {}).get("dev") or {}).get("pearson", float("nan")), 1
        )
        if results.get("stsb")
        else None,
        "sts17": {k: round(v["pearson"], 1) for k, v in results["sts17"].items()},
        "train_seconds": round(model["seconds"], 1),
        "pairs_per_second": round(sum(h["pairs_per_second"] for h in history) / len(history)),
        "best_epoch": model.get("best_epoch"),
        "epoch_dev_scores": [h.get("dev_score") for h in history],
    }


def stage_seconds(root: Path) -> dict:
    seconds = {}
    for stage in ("deduplicated_pairs", "sentencepiece_model", "training_data", "psp_model"):
        record = json.loads((root / "multi" / stage / "manifest.json").read_text())["record"]
        seconds[stage] = round(float(record.get("seconds", 0.0)), 1)
    return seconds


def throughput(root: Path, resources: dict, steps: int, rounds: int) -> dict:
    """pairs/s of the multi training file against de's pairs packed with the same vocabulary,
    same settings, ``steps`` steps each, alternating ``rounds`` times."""
    from ops.training_data.encoding import encode_and_pack, packing_tokenizer
    from psp_core import train
    from psp_core.training import TrainConfig

    spm = root / "multi" / "sentencepiece_model" / "sentencepiece.model"
    single = root / "throughput" / "de-multi-vocab.h5"
    single.parent.mkdir(parents=True, exist_ok=True)
    encode_and_pack(
        root / "de" / "deduplicated_pairs" / "pairs.parquet",
        packing_tokenizer(spm),
        single,
        lang="de",
        kind="bitext",
        seed=1,
    )
    files = {"multi": root / "multi" / "training_data" / "train.h5", "de": single}
    rates: dict[str, list[float]] = {name: [] for name in files}
    for _ in range(rounds):
        for name, data in files.items():
            config = TrainConfig(lr=0.05, max_steps=steps, device="cpu", checkpoint_every=0)
            started = time.perf_counter()
            train(
                data,
                spm,
                root / "throughput" / f"model-{name}",
                config,
                pretokenizer="none",
                resume=False,  # a max_steps run keeps its checkpoint: never resume one
            )
            rates[name].append(steps * config.batch_size / (time.perf_counter() - started))
    medians = {name: sorted(values)[len(values) // 2] for name, values in rates.items()}
    return {
        "steps": steps,
        "pairs_per_second": {k: [round(v) for v in vs] for k, vs in rates.items()},
        "median": {k: round(v) for k, v in medians.items()},
        "multi_over_single": round(medians["multi"] / medians["de"], 3),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_multi")
    parser.add_argument(
        "--variants",
        default="1.0:select,0.5:select,0.3:select,0.3",
        help="comma-separated ALPHA[:select|:suite][:eN]: the sampling "
        "alpha, ':select' to keep the best epoch on STS 2017 en-en "
        "(the paper's model selection; by default the multilingual model keeps its last epoch, "
        "':final' says so explicitly), ':suite' the best epoch on the dev suite's mean, ':eN' to "
        "train N epochs instead of the demo profile's, ':force' to train again a version already "
        "trained from the same inputs",
    )
    parser.add_argument("--hold-every", type=int, default=30)
    parser.add_argument(
        "--skip-languages",
        action="store_true",
        help="reuse the per-language models already in --root",
    )
    parser.add_argument("--throughput-steps", type=int, default=0)
    parser.add_argument("--throughput-rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        f"de and zh only (the first {_common.QUICK_PAIRS:,} pairs of each), the smoke profile, "
        "variant 1.0, the "
        "first 100 lines of the evaluation sets, data ops in one process, root under "
        "--results-dir",
    )
    return parser.parse_args()


def prepare(args: argparse.Namespace) -> tuple[Path, list[str], list[str], str]:
    """Set the environment the assets read (registry, profile, storage root, evaluation sets)
    for ``args``; returns the storage root, the held-back zh pairs (English, Chinese) and the
    profile. With ``--quick``: de and zh only, a slice of each, the smoke profile, the root
    under ``--results-dir``."""
    shared = args.data_dir.resolve()
    profile, source = "demo", _common.OFFLINE_REGISTRY
    languages, limit = None, None
    if args.quick:
        args.root, args.variants, args.throughput_steps = args.results_dir / "quick-multi", "1.0", 0
        profile, languages, limit = "smoke", ["de", "zh"], _common.QUICK_PAIRS
        source = _common.quick_registry(args.data_dir, args.results_dir, ("de",))
    root = args.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    english, chinese = held_back_zh(root / "zh_bitext", args.hold_every, shared, limit)
    registry = registry_file(root, root / "zh_bitext", shared, source, languages)
    os.environ["PSP_LANGUAGES"] = str(registry)
    os.environ["PSP_PROFILE"] = profile
    os.environ["PSP_STORAGE_ROOT"] = str(root)
    os.environ["PSP_EVAL_DIR"] = str(_common.eval_dir_for(args).resolve())
    os.environ["PSP_PARANMT_URL"] = str(shared / "paraphrase" / "paranmt-format-sample.txt.gz")
    return root, english, chinese, profile


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    root, english, chinese, profile = prepare(args)

    from dagster import DagsterInstance, materialize

    from assets.settings.languages import load_registry
    from assets.settings.resources import ComputeResource, default_resources
    from pipelines.definitions import defs

    resources = default_resources()
    if args.quick:  # worker processes cost more than a slice of pairs: the ops run inline
        resources["compute"] = ComputeResource(workers=1)
    instance = DagsterInstance.ephemeral()

    def job_assets(name: str, leave_out: tuple[str, ...] = ()) -> list:
        """The assets a job materializes (materialize() orders them by their dependencies)."""
        keys = defs.resolve_job_def(name).asset_layer.executable_asset_keys
        return [defs.get_assets_def(k) for k in keys if k.to_user_string() not in leave_out]

    language_job = "prepare_pairs_job" if args.skip_languages else "psp_language_job"
    language_assets = job_assets(language_job)
    multi_assets = job_assets("psp_multi_job", leave_out=("evaluation_scoreboard",))
    codes = load_registry().multi_languages()
    out: dict = {"root": str(root), "held_back_zh_pairs": len(english), "languages": {}}
    for code in codes:
        started = time.perf_counter()
        result = materialize(
            language_assets,
            partition_key=code,
            resources=resources,
            instance=instance,
        )
        assert result.success, code
        if (root / code / "model_evaluation" / "results.json").is_file():
            out["languages"][code] = summary(root, code)
            out["languages"][code]["dev"] = dev_of(root, code)
            out["languages"][code]["job_seconds"] = round(time.perf_counter() - started, 1)
        print(f"{code}: {out['languages'].get(code)}", file=sys.stderr, flush=True)
    out["zh_model_zh_en"] = zh_check(root / "zh" / "psp_model" / "model", english, chinese)

    out["multi"] = []
    for variant in args.variants.split(","):
        alpha, *options = variant.split(":")
        alpha = float(alpha)
        select = "select" in options
        suite = "suite" in options
        training = {"dev_sts": "sts17/en-en.tsv" if select else None}
        training["select_on_dev_suite"] = suite
        training["force"] = "force" in options  # (train again: not the version of these inputs)
        epochs = [int(option[1:]) for option in options if option.startswith("e")]
        if epochs:
            training["epochs"] = epochs[0]
        started = time.perf_counter()
        result = materialize(
            multi_assets,
            resources=resources,
            instance=instance,
            run_config={
                "ops": {
                    "multi_pairs": {"config": {"sampling_alpha": alpha}},
                    "multi_psp_model": {"config": training},
                }
            },
        )
        assert result.success, variant
        pairs = json.loads((root / "multi" / "deduplicated_pairs" / "manifest.json").read_text())
        row = {
            "alpha": alpha,
            "model_selection": "best dev-suite mean epoch"
            if suite
            else "best STS 2017 en-en epoch"
            if select
            else "last epoch",
            "epochs": epochs[0] if epochs else f"the {profile} profile's",
            "job_seconds": round(time.perf_counter() - started, 1),
            "stage_seconds": stage_seconds(root),
            "pairs_out": {k: v["pairs_out"] for k, v in pairs["record"]["languages"].items()},
            **summary(root, "multi"),
            "zh_en": zh_check(root / "multi" / "psp_model" / "model", english, chinese),
            "dev": dev_of(root, "multi"),
        }
        out["multi"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    if args.throughput_steps:
        out["throughput"] = throughput(
            root, resources, args.throughput_steps, args.throughput_rounds
        )
    out["load_average"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
