"""A language's run where every stage is reused: `dagster job execute` wall time, in-process
(the code location's default executor) against multiprocess (a process per step).

A first run materializes `de` with the smoke profile on the shared data (the offline registry
`configs/languages-shared-data.toml`); then the same command runs again `--repeats` times with
each executor, and every step finds its manifest and reuses its output. The figure is the whole
command, as a user or CI waits for it: interpreter start, imports, run and step set-up, the
manifest checks, metadata and the run's end.

    python benchmarks/noop_rerun.py [--repeats 3] [--partition de]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import yaml

ROOT = Path(__file__).resolve().parents[1]
DAGSTER = str(Path(sys.executable).with_name("dagster"))


def execute(partition: str, config: Path, env: dict, log: Path) -> float:
    command = [DAGSTER, "job", "execute", "-m", "pipelines.definitions", "-j", "psp_language_job"]
    command += ["--tags", json.dumps({"dagster/partition": partition}), "-c", str(config)]
    started = time.perf_counter()
    with open(log, "ab") as output:
        subprocess.run(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, check=True
        )
    return time.perf_counter() - started


def snapshot(directory: Path) -> dict[Path, tuple[int, int]]:
    """Every file under ``directory`` with its (inode, mtime in ns): what a rewrite changes."""
    return {
        path: (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in directory.rglob("*")
        if path.is_file()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--partition", default="de")
    parser.add_argument("--profile", type=Path, default=ROOT / "configs" / "smoke.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--executors",
        default="in_process,multiprocess",
        help="executors rerun beside the default one (comma-separated; empty: none)",
    )
    _common.add_quick_argument(
        parser,
        f"the first {_common.QUICK_PAIRS:,} pairs of the partition's bitext, the first 100 lines "
        "of the evaluation "
        "sets, data ops in one process, the first run's steps in one process, one rerun with the "
        "default executor",
    )
    args = parser.parse_args()
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", f"en-{args.partition}") is None:
        return
    registry = ROOT / "configs" / "languages-shared-data.toml"
    eval_dir = _common.eval_dir_for(args)
    if args.quick:
        args.repeats, args.executors = 1, ""
        registry = _common.quick_registry(args.data_dir, args.results_dir, (args.partition,))
    with tempfile.TemporaryDirectory(prefix="noop-rerun-") as work:
        work = Path(work)
        home = work / "home"
        home.mkdir()
        shutil.copy(ROOT / "configs" / "dagster.yaml", home / "dagster.yaml")
        env = os.environ | {
            "DAGSTER_HOME": str(home),
            "PSP_STORAGE_ROOT": str(work / "storage"),
            "PSP_LANGUAGES": str(registry),
            "PSP_EVAL_DIR": str(eval_dir.resolve()),
            "PSP_PARANMT_URL": str(
                args.data_dir.resolve() / "paraphrase" / "paranmt-format-sample.txt.gz"
            ),
        }
        base = yaml.safe_load(args.profile.read_text())
        if args.quick:  # worker processes cost more than a slice of pairs: the ops run inline
            base.setdefault("resources", {})["compute"] = {"config": {"workers": 1}}

        def config_for(executor: str) -> Path:
            config = copy.deepcopy(base)
            if executor != "default":
                config["execution"] = {"config": {executor: {}}}
            path = work / f"{executor}.yaml"
            path.write_text(yaml.safe_dump(config))
            return path

        executors = ["default", *filter(None, args.executors.split(","))]
        configs = {executor: config_for(executor) for executor in executors}
        log = work / "runs.log"
        # (the run that fills the storage is not measured: with --quick, its steps in one process)
        first_config = config_for("in_process") if args.quick else configs["default"]
        first = execute(args.partition, first_config, env, log)
        _common.log.info("first run (everything computed): %.1f s", first)
        outputs = snapshot(work / "storage" / args.partition)
        times: dict[str, list[float]] = {executor: [] for executor in configs}
        for _ in range(args.repeats):  # the executors take turns, so machine noise hits all
            for executor, config in configs.items():
                times[executor].append(execute(args.partition, config, env, log))
            _common.log.info("%s", {k: round(v[-1], 1) for k, v in times.items()})
        text = log.read_text(errors="replace")
        rewritten = sorted(
            str(path.relative_to(work))
            for path, stamp in snapshot(work / "storage" / args.partition).items()
            if outputs.get(path) != stamp
        )
    n_runs = 1 + len(configs) * args.repeats
    _common.emit(
        {
            "benchmark": "noop_rerun",
            "machine": _common.machine_info(),
            "partition": args.partition,
            "profile": str(args.profile.relative_to(ROOT)),
            "first_run_s": round(first, 1),
            "rerun_s_median": {k: round(statistics.median(v), 1) for k, v in times.items()},
            "rerun_s_all": {k: [round(x, 1) for x in v] for k, v in times.items()},
            "step_successes_per_run": text.count("STEP_SUCCESS") / n_runs,
            "files_rewritten_by_reruns": rewritten,
            "targets": {"default_rerun_s_le_20": statistics.median(times["default"]) <= 20},
        }
    )


if __name__ == "__main__":
    main()
