"""What each profile (smoke, demo, paper) costs for every language: ``psp_language_job`` on the
shared data, 2 CPU cores, the wall time of every step, and whether the run succeeds.

Per language, one storage root and three runs in a row: ``smoke`` first (a fresh root: it pays
for the data stages, which do not depend on the profile), then ``demo`` and ``paper``, which
reuse raw pairs, language ID, the length filter and dedup and pay for the vocabulary, the packed
data, training and evaluation. A profile's cost for a fresh language is the data stages (from
the smoke run) plus its own steps.

With ``--paper-steps 0`` the paper profile runs whole (25 epochs, mega-batches annealed as the
paper does, model selection on its dev set) and its cost is measured, not estimated.

Otherwise the paper profile is run for real except for its length: training stops after ``--paper-steps``
mini-batches (``max_steps``), so the run checks that the paper's settings (vocabulary 50,000,
dim 1024, mega-batches of 100) work for the language, and its full cost is estimated from the
measured training pairs/s: 25 epochs of the packed pairs at that rate, plus the run's other
steps. Those steps run at the largest mega-batch from the start (``anneal_every: 0``), where
the full run spends most of its time and mining costs most, so the estimate errs long. Each run is a child process executing the job in process (one Dagster instance per run).

    python benchmarks/profile_costs.py [--languages de zh] [--profiles smoke demo paper]

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "configs" / "languages-shared-data.toml"
JOB = "psp_language_job"
DATA_STEPS = ("raw_pairs", "langid_filtered_pairs", "length_filtered_pairs", "deduplicated_pairs")
PAPER_EPOCHS = 25
PAPER_BATCH_SIZE = 128
log = logging.getLogger("profile_costs")


def run_config(profile: str, paper_steps: int, workers: int | None = None) -> dict:
    """The run config of ``profile`` (the paper profile cut at ``paper_steps``), with the
    compute resource's ``workers`` when given."""
    config: dict = {"resources": {"profile": {"config": {"name": profile}}}}
    if workers is not None:
        config["resources"]["compute"] = {"config": {"workers": workers}}
    if profile == "paper" and paper_steps > 0:
        # at the largest mega-batch from the first step (anneal_every 0): the full run spends
        # most of its steps there (it reaches 100 after 15,000 steps), and mining costs grow
        # with the mega-batch, so the rate measured early in an annealed run would flatter it
        config["ops"] = {"psp_model": {"config": {"max_steps": paper_steps, "anneal_every": 0}}}
    return config


def child(lang: str, profile: str, paper_steps: int, workers: int | None) -> int:
    """Execute the language job in this process and print its steps' wall times."""
    from dagster import DagsterInstance

    from pipelines.definitions import defs

    sys.path.insert(0, str(Path(__file__).parent))
    from prep_speed import step_windows

    instance = DagsterInstance.ephemeral()
    started = time.time()
    result = defs.resolve_job_def(JOB).execute_in_process(
        run_config=run_config(profile, paper_steps, workers),
        partition_key=lang,
        instance=instance,
        raise_on_error=False,
    )
    record: dict = {"success": result.success, "wall_s": round(time.time() - started, 1)}
    windows, _ = step_windows(instance, result.run_id)
    record["steps_s"] = {step: round(end - start, 1) for step, (start, end) in windows.items()}
    if result.success:
        storage = Path(os.environ["PSP_STORAGE_ROOT"]) / lang
        model = json.loads((storage / "psp_model" / "manifest.json").read_text())["record"]
        data = json.loads((storage / "training_data" / "manifest.json").read_text())["record"]
        history = model["history"]
        record["training"] = {
            "pairs": data.get("n_out") or data.get("pairs"),
            "dim": model["dim"],
            "vocab_size": model["vocab_size"],
            "steps": model["steps"],
            "pairs_per_second": history[-1].get("pairs_per_second") if history else None,
        }
    sys.stdout.write("PROFILE_RESULT " + json.dumps(record) + "\n")
    return 0


def measure(lang: str, profile: str, storage: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    env.update(
        PSP_LANGUAGES=str(args.registry),
        PSP_STORAGE_ROOT=str(storage),
        PSP_EVAL_DIR=str(_common.eval_dir_for(args)),
        PSP_PARANMT_URL=str(args.data_dir / "paraphrase" / "paranmt-format-sample.txt.gz"),
    )
    command = [sys.executable, __file__, "--child", lang, profile]
    command += ["--paper-steps", str(args.paper_steps)]
    command += ["--workers", str(args.workers)] if args.workers is not None else []
    log.info("%s, %s profile", lang, profile)
    output = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, check=False
    ).stdout
    for line in output.splitlines():
        if line.startswith("PROFILE_RESULT "):
            return json.loads(line.removeprefix("PROFILE_RESULT "))
    return {"success": False, "error": output[-2000:]}


def summarize(lang: str, runs: dict[str, dict], paper_steps: int) -> dict:
    """Per profile: the cost of a fresh run (the data stages, measured in the first run, plus
    the profile's own steps) and, for paper, the estimate at 25 full epochs."""
    first = next(iter(runs.values()))
    data_s = sum(first.get("steps_s", {}).get(step, 0.0) for step in DATA_STEPS)
    summary: dict = {"data_stages_s": round(data_s, 1)}
    for profile, run in runs.items():
        own = sum(s for step, s in run.get("steps_s", {}).items() if step not in DATA_STEPS)
        entry = {"success": run["success"], "fresh_run_s": round(data_s + own, 1)}
        training = run.get("training")
        trained = run.get("steps_s", {}).get("psp_model", 0.0)
        if profile == "paper" and training and trained and paper_steps == 0:
            # the whole run, measured: 25 epochs with the paper's annealing and selection
            entry["training_pairs_per_second"] = round(PAPER_EPOCHS * training["pairs"] / trained)
            entry["full_training_s"] = round(trained)
        elif profile == "paper" and training and trained:
            # the step's own rate: mini-batches x batch size over the step's wall time (model
            # set-up and saving included, so it errs slow); an epoch-end rate needs an epoch
            rate = training["steps"] * PAPER_BATCH_SIZE / trained
            entry["training_pairs_per_second"] = round(rate)
            full_training = PAPER_EPOCHS * training["pairs"] / rate
            entry["estimated_full_run_s"] = round(data_s + own - trained + full_training)
            entry["estimated_full_training_s"] = round(full_training)
        summary[profile] = entry
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--languages", nargs="+", default=None, help="default: the registry's")
    parser.add_argument("--profiles", nargs="+", default=["smoke", "demo", "paper"])
    parser.add_argument(
        "--paper-steps",
        type=int,
        default=300,
        help="mini-batches the paper profile trains for (its full cost is estimated); 0: "
        "the whole run (25 epochs, the paper's annealing), measured",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="data-op worker processes (default: per core)"
    )
    _common.add_quick_argument(
        parser,
        f"de only, the smoke profile, the first {_common.QUICK_PAIRS:,} pairs of the bitext, "
        "the first 100 lines "
        "of the evaluation sets, data ops in one process",
    )
    parser.add_argument("--child", nargs=2, metavar=("LANG", "PROFILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.paper_steps, args.workers)
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext") is None:
        return 0
    args.registry = REGISTRY
    if args.quick:
        args.languages, args.profiles, args.workers = ["de"], ["smoke"], 1
        args.registry = _common.quick_registry(args.data_dir, args.results_dir, ("de",))
    os.environ["PSP_LANGUAGES"] = str(args.registry)
    from assets.settings.languages import load_registry

    languages = args.languages or list(load_registry().codes)
    results: dict = {
        "benchmark": "profile_costs",
        "machine": _common.machine_info(),
        "params": {"profiles": args.profiles, "paper_steps": args.paper_steps},
        "languages": {},
    }
    for lang in languages:
        with tempfile.TemporaryDirectory(prefix=f"profile-costs-{lang}-") as storage:
            runs = {p: measure(lang, p, Path(storage), args) for p in args.profiles}
        results["languages"][lang] = {
            "runs": runs,
            "summary": summarize(lang, runs, args.paper_steps),
        }
        log.info("%s: %s", lang, json.dumps(results["languages"][lang]["summary"]))
    _common.emit(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
