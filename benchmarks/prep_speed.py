"""Corpus preparation through Dagster: ``prepare_data_job`` on N resampled en-de pairs served by a
loopback OPUS server; wall time per stage, pairs/s end to end, peak RSS and linearity in N.

This measures the chain a user runs: the code location's ``prepare_data_job`` (raw_pairs ->
langid_filtered_pairs -> length_filtered_pairs -> deduplicated_pairs -> sentencepiece_model ->
training_data), resolved from ``pipelines.definitions.defs`` and executed in process
(``execute_in_process``: Dagster's in-process executor, every step in one process), with the
code location's own resources configured from the environment as ``dagster job execute`` would:
``PSP_STORAGE_ROOT`` a fresh directory, ``PSP_OPUS_API`` a loopback OPUS server
(``tests/ops/opus_server.py``) and ``PSP_LANGUAGES`` a generated registry with one language
whose one OPUS corpus is the benchmark zip.

For each size a moses zip (``Bench.de-en.en`` / ``Bench.de-en.de``) is built once from the real
en-de bitext and cached under ``--cache``: the 95k pairs are resampled as concatenated seeded
permutations, and every copy after the first has the words of each side shuffled (seeded), so
the pairs stay distinct and deduplication has real work instead of collapsing the corpus back to
95k pairs; short sentences (few word orders) still give some duplicates.

Each run is a fresh child process (so its peak RSS is its own: ``ru_maxrss`` of the process that
executed every step); a thread samples its RSS, the PSS of it and its worker processes together,
and their CPU time every 0.2 s. With ``--repeats N`` the sizes take turns for N rounds (every
other round in reverse order), so that the slow phases of a shared machine fall on every size
alike, and the median run of each size is reported.

Per stage: the seconds its manifest records (the work) and the Dagster step's wall time (step
start to step success events: the work plus reading the registry, the manifest, the asset checks
and the metadata). Sentencepiece training costs what ``--input-sentence-size`` and
``--vocab-size`` say, not what the corpus size says, so the end-to-end figure is given with and
without the sentencepiece_model step. The defaults (vocab 16,000 on a 200,000-sentence sample)
are the benchmark's, not the paper's (``--vocab-size 50000 --input-sentence-size 10000000``).

Goals (2 cores): >= 40,000 pairs/s end to end without sentencepiece training; peak RSS of the run
below 2 GiB; the largest size within its size ratio +/- 10% of the time of the smallest (4 +/-
0.4x for 2.5M -> 10M).

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import _common
import numpy as np

TARGET_PAIRS_PER_S = 40_000
TARGET_RSS_MIB = 2048
TARGET_LINEARITY = 0.10  # time ratio within (size ratio) * (1 +/- 0.1)
CORPUS_NAME = "Bench"
JOB = "prepare_data_job"
SPM_STEP = "sentencepiece_model"

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="where the zips are cached and the runs work (default <results-dir>/prep_speed)",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["2500000", "10000000"],
        help="pair counts, smallest first (space- or comma-separated)",
    )
    parser.add_argument("--lang", default="de")
    parser.add_argument("--vocab-size", type=int, default=16_000)
    parser.add_argument("--input-sentence-size", type=int, default=200_000)
    parser.add_argument(
        "--threads", type=int, default=2, help="sentencepiece threads (ComputeResource.threads)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="processes for language ID and encoding (ComputeResource.workers)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampled corpus")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of one run per size (sizes alternate); the run with the median pairs/s "
        "(without spm) of each size is reported",
    )
    parser.add_argument("--keep", action="store_true", help="keep the runs' storage roots")
    _common.add_quick_argument(
        parser, "one size of 3,000 pairs, vocabulary 500 on 6,000 sentences, 1 worker, 1 thread"
    )
    parser.add_argument("--verbose", action="store_true")
    # internal: one measured run in this (child) process
    parser.add_argument("--child-storage", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.vocab_size, args.input_sentence_size = ["3000"], 500, 6000
        args.workers = args.threads = 1
    args.cache = args.cache or args.results_dir / "prep_speed"
    args.sizes = [int(x) for text in args.sizes for x in str(text).split(",") if x]
    return args


# --------------------------------------------------------------------------------------------
# the zips


def resampled_side(lines: list[str], n_pairs: int, seed: int, word_seed: int) -> Iterator[str]:
    """``n_pairs`` lines: seeded permutations of ``lines`` one after the other; from the second
    permutation on, each line's words are shuffled (the permutations are the same for both
    sides, the word shuffles are not)."""
    order_rng = np.random.default_rng(seed)
    words_rng = random.Random(word_seed)
    produced, copy = 0, 0
    while produced < n_pairs:
        order = order_rng.permutation(len(lines))[: n_pairs - produced]
        for index in order.tolist():
            line = lines[index]
            if copy:
                words = line.split()
                words_rng.shuffle(words)
                line = " ".join(words)
            yield line
        produced += len(order)
        copy += 1


def build_zip(data_dir: Path, cache_dir: Path, lang: str, n_pairs: int, seed: int) -> Path:
    """The cached moses zip of ``n_pairs`` resampled en-``lang`` pairs (built once)."""
    path = cache_dir / f"en-{lang}-{n_pairs}-seed{seed}.zip"
    if path.is_file():
        return path
    english, other = _common.read_bitext(data_dir, lang)
    pair = "-".join(sorted(("en", lang)))
    log.info("building %s (%d pairs; cached afterwards)", path, n_pairs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for code, lines, word_seed in (("en", english, seed + 1), (lang, other, seed + 2)):
                member = f"{CORPUS_NAME}.{pair}.{code}"
                with archive.open(member, "w", force_zip64=True) as handle:
                    block: list[str] = []
                    for line in resampled_side(lines, n_pairs, seed, word_seed):
                        block.append(line)
                        if len(block) == 65_536:
                            handle.write(("\n".join(block) + "\n").encode())
                            block.clear()
                    if block:
                        handle.write(("\n".join(block) + "\n").encode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def registry_toml(lang: str, version: str) -> str:
    """A language registry with one language whose one OPUS corpus is the benchmark zip."""
    return (
        f"[languages.{lang}]\n"
        'source = "opus"\n'
        f'corpora = [{{ name = "{CORPUS_NAME}", version = "{version}" }}]\n'
    )


# --------------------------------------------------------------------------------------------
# one measured run (child process)


def run_config(args: argparse.Namespace) -> dict:
    """The run's config: the benchmark's sentencepiece settings, the compute resource's
    threads and workers, Dagster's console log at INFO (DEBUG with --verbose)."""
    return {
        "ops": {
            SPM_STEP: {
                "config": {
                    "vocab_size": args.vocab_size,
                    "input_sentence_size": args.input_sentence_size,
                }
            }
        },
        "resources": {"compute": {"config": {"threads": args.threads, "workers": args.workers}}},
        "loggers": {"console": {"config": {"log_level": "DEBUG" if args.verbose else "INFO"}}},
    }


def step_windows(instance, run_id: str) -> tuple[dict[str, tuple[float, float]], tuple]:
    """Each step's (start, success) event times, and the run's (start, success) times."""
    from dagster import DagsterEventType

    starts: dict[str, float] = {}
    windows: dict[str, tuple[float, float]] = {}
    run: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type == DagsterEventType.STEP_START:
            starts[entry.step_key] = entry.timestamp
        elif event.event_type == DagsterEventType.STEP_SUCCESS:
            windows[entry.step_key] = (starts[entry.step_key], entry.timestamp)
        elif event.event_type == DagsterEventType.RUN_START:
            run["start"] = entry.timestamp
        elif event.event_type == DagsterEventType.RUN_SUCCESS:
            run["end"] = entry.timestamp
    ordered = dict(sorted(windows.items(), key=lambda item: item[1][0]))
    return ordered, (run.get("start"), run.get("end"))


def library_floor(stages: Path, n_pairs: int = 16_384, repeats: int = 3) -> dict:
    """CPU seconds per pair, on one core, of the library work the chain cannot do without;
    best of ``repeats``. Language ID as the chain does it (``predict_label_ids``, batched, its
    token cache warmed on the same pairs first: the steady state of a long run), with fastText's
    own ``predict`` on the same lines for reference, and sentencepiece ``Encode`` (1 thread) on
    both deduplicated sides. With 2 cores, ``2 / (langid + sentencepiece)`` is the most pairs
    per second a chain built on them can reach on this machine, at this moment."""
    from ops.language_id.langid import LanguageIdentifier
    from ops.pairs.pair_files import iter_pair_batches
    from ops.training_data.encoding import packing_tokenizer

    raw = next(iter_pair_batches(stages / "raw_pairs" / "pairs.parquet", n_pairs))
    lowered = next(iter_pair_batches(stages / "deduplicated_pairs" / "pairs.parquet", n_pairs))
    identifier = LanguageIdentifier()
    fasttext_only = LanguageIdentifier(batched=False)
    model = stages / "sentencepiece_model" / "sentencepiece.model"
    tokenizer = packing_tokenizer(model, num_threads=1)
    raw_lines = raw.column("src").to_pylist() + raw.column("tgt").to_pylist()
    sentences = lowered.column("src").to_pylist() + lowered.column("tgt").to_pylist()

    def best(function, argument, pairs: int) -> float:
        timings = []
        for _ in range(repeats):
            started = time.process_time()
            function(argument)
            timings.append(time.process_time() - started)
        return min(timings) / pairs * 1e6

    def batched_langid(columns) -> None:
        for column in columns:
            identifier.predict_label_ids(column)

    columns = [raw.column("src"), raw.column("tgt")]
    batched_langid(columns)  # warm the token cache
    langid_us = best(batched_langid, columns, raw.num_rows)
    fasttext_us = best(fasttext_only.predict, raw_lines, raw.num_rows)
    sentencepiece_us = best(
        lambda lines: tokenizer.processor.Encode(lines, out_type=int, num_threads=1),
        sentences,
        lowered.num_rows,
    )
    return {
        "langid_us_per_pair": round(langid_us, 2),
        "fasttext_predict_us_per_pair": round(fasttext_us, 2),
        "sentencepiece_us_per_pair": round(sentencepiece_us, 2),
        "ceiling_pairs_per_s_2_cores": round(2 / (langid_us + sentencepiece_us) * 1e6),
    }


def child(args: argparse.Namespace) -> int:
    """Execute ``prepare_data_job`` for ``args.lang`` in this process and print its record."""
    sampler = _common.ProcessSampler().start()
    began = time.time()
    from dagster import DagsterInstance

    from pipelines.definitions import defs

    job = defs.resolve_job_def(JOB)
    imported = time.time()
    instance = DagsterInstance.ephemeral()
    result = job.execute_in_process(
        run_config=run_config(args),
        partition_key=args.lang,
        instance=instance,
        raise_on_error=False,
    )
    ended = time.time()
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    largest_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    vmhwm = _common.status_kb("VmHWM")
    sampler.stop()
    if not result.success:
        log.error("%s failed for %s; see the log above", JOB, args.lang)
        return 1
    windows, (run_start, run_end) = step_windows(instance, result.run_id)
    stages = {}
    for step, (start, end) in windows.items():
        directory = args.child_storage / args.lang / step
        record = json.loads((directory / "manifest.json").read_text())["record"]
        stages[step] = {
            "step_s": round(end - start, 3),
            "manifest_s": round(record.get("seconds", 0.0), 3),
            **{key: record[key] for key in ("n_in", "n_out", "dropped") if key in record},
            # the seconds of the stage's sub-steps its record keeps apart (caps, shuffle...)
            **{
                f"{key}_s": round(value["seconds"], 3)
                for key, value in record.items()
                if isinstance(value, dict) and "seconds" in value
            },
            **sampler.window(start, end),
        }
    record = {
        "pairs": stages["raw_pairs"]["n_in"],
        "import_s": round(imported - began, 3),
        "execute_s": round(ended - imported, 3),
        "run_s": round(run_end - run_start, 3) if run_start and run_end else None,
        "cpu_s": sampler.window(imported, ended).get("cpu_s"),
        "stages": stages,
        "ru_maxrss_mib": round(own_peak / 1024),
        "vmhwm_mib": round(vmhwm / 1024) if vmhwm else None,
        "largest_worker_maxrss_mib": round(largest_child / 1024),
        "peak_tree_pss_mib": sampler.window(imported, ended).get("peak_tree_pss_mib"),
        "rss_timeline_mib": sampler.timeline(began),
        "hdf5_mib": round(
            (args.child_storage / args.lang / "training_data" / "train.h5").stat().st_size / 2**20,
            1,
        ),
        "library_floor": library_floor(args.child_storage / args.lang),
    }
    sys.stdout.write("PREP_RESULT " + json.dumps(record) + "\n")
    return 0


# --------------------------------------------------------------------------------------------
# the parent: zips, the loopback server, one child per run


def run_size(args: argparse.Namespace, server, zip_path: Path, n_pairs: int) -> dict:
    version = f"v{n_pairs}"
    work = args.cache / f"tmp-run-{n_pairs}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    registry = work / "languages.toml"
    registry.write_text(registry_toml(args.lang, version))
    served = server.add_corpus(CORPUS_NAME, version, "en", args.lang, zip_path.read_bytes())
    # the child imports this checkout's packages, not wherever they are installed
    python_path = os.pathsep.join(
        filter(None, [str(_common.REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != "PSP_OPUS_DOWNLOAD_BASE"},  # no mirror
        "PYTHONPATH": python_path,
        "PSP_LANGUAGES": str(registry),
        "PSP_STORAGE_ROOT": str(work / "storage"),
        "PSP_OPUS_API": server.api_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--child-storage"]
    command += [str(work / "storage"), "--lang", args.lang, "--vocab-size", str(args.vocab_size)]
    command += ["--input-sentence-size", str(args.input_sentence_size)]
    command += ["--threads", str(args.threads), "--workers", str(args.workers)]
    command += ["--verbose"] if args.verbose else []
    log.info("size %d: %s in a child process (storage %s)", n_pairs, JOB, work / "storage")
    try:
        completed = subprocess.run(
            command, stdout=subprocess.PIPE, text=True, check=False, env=env, cwd=_common.REPO_ROOT
        )
    finally:
        server.files.pop(served, None)
        server.corpora[:] = [c for c in server.corpora if c["path"] != served]
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("PREP_RESULT ")]
    if completed.returncode or not lines:
        raise SystemExit(f"the run for {n_pairs} pairs failed (exit {completed.returncode})")
    return summarize(json.loads(lines[-1][len("PREP_RESULT ") :]))


def summarize(record: dict) -> dict:
    pairs = record["pairs"]
    stages = record["stages"]
    spm_step = stages.get(SPM_STEP, {}).get("step_s", 0.0)
    without_spm = record["execute_s"] - spm_step
    for name, stage in stages.items():
        if name != SPM_STEP and stage["step_s"] and "n_in" in stage:
            stage["pairs_in_per_s"] = round(stage["n_in"] / stage["step_s"])
    slowest = max((name for name in stages if name != SPM_STEP), key=lambda n: stages[n]["step_s"])
    return {
        "pairs": pairs,
        "end_to_end_s": record["execute_s"],
        "end_to_end_pairs_per_s": round(pairs / record["execute_s"]),
        "without_spm_s": round(without_spm, 3),
        "without_spm_pairs_per_s": round(pairs / without_spm),
        "spm_training_s": spm_step,
        # Dagster's run set-up and tear-down: the part of end_to_end_s outside every step
        "outside_steps_s": round(
            record["execute_s"] - sum(stage["step_s"] for stage in stages.values()), 3
        ),
        "import_s": record["import_s"],
        "dagster_run_s": record["run_s"],  # RUN_START to RUN_SUCCESS
        "cpu_per_wall": round(record["cpu_s"] / record["execute_s"], 2),
        "slowest_step_without_spm": slowest,
        "stages": stages,
        "hdf5_mib": record["hdf5_mib"],
        "ru_maxrss_mib": record["ru_maxrss_mib"],
        "vmhwm_mib": record["vmhwm_mib"],
        "largest_worker_maxrss_mib": record["largest_worker_maxrss_mib"],
        "peak_tree_pss_mib": record["peak_tree_pss_mib"],
        "rss_timeline_mib": record["rss_timeline_mib"],
        # measured after the run, in the same process: see library_floor
        "library_floor": record["library_floor"],
    }


def targets(args: argparse.Namespace, runs: list[dict], attempts: dict[int, list[dict]]) -> dict:
    smallest, largest = runs[0], runs[-1]
    size_ratio = largest["pairs"] / smallest["pairs"]
    time_ratio = largest["without_spm_s"] / smallest["without_spm_s"]
    # the same ratio within each round (runs next to each other in time), for the spread
    round_ratios = [
        round(big["without_spm_s"] / small["without_spm_s"], 3)
        for small, big in zip(attempts[args.sizes[0]], attempts[args.sizes[-1]], strict=True)
    ]
    return {
        "pairs_per_s_without_spm": {
            "target": TARGET_PAIRS_PER_S,
            "values": [r["without_spm_pairs_per_s"] for r in runs],
            "passed": all(r["without_spm_pairs_per_s"] >= TARGET_PAIRS_PER_S for r in runs),
        },
        "peak_rss_mib": {
            "target_below": TARGET_RSS_MIB,
            "values": [r["ru_maxrss_mib"] for r in runs],
            "passed": all(r["ru_maxrss_mib"] < TARGET_RSS_MIB for r in runs),
        },
        "time_ratio_without_spm": {
            "size_ratio": round(size_ratio, 3),
            "value": round(time_ratio, 3),
            "allowed": [
                round(size_ratio * (1 - TARGET_LINEARITY), 2),
                round(size_ratio * (1 + TARGET_LINEARITY), 2),
            ],
            "passed": abs(time_ratio / size_ratio - 1) <= TARGET_LINEARITY,
            "per_round": round_ratios,
        },
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    logging.getLogger("ops").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the run storage's migrations
    if args.child_storage is not None:
        return child(args)
    if _common.require_data(args.data_dir, "bitext", f"en-{args.lang}") is None:
        return 0
    sys.path.insert(0, str(_common.REPO_ROOT))
    from tests.ops.opus_server import OpusServer

    machine = _common.machine_info()
    zips = {n: build_zip(args.data_dir, args.cache, args.lang, n, args.seed) for n in args.sizes}
    os.environ.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    server = OpusServer().start()
    # the sizes take turns (and every other round in reverse order), so that a slow phase of
    # this shared machine falls on all sizes alike instead of on the repeats of one size
    attempts: dict[int, list[dict]] = {n: [] for n in args.sizes}
    try:
        for round_ in range(max(1, args.repeats)):
            for n in args.sizes if round_ % 2 == 0 else args.sizes[::-1]:
                attempts[n].append(run_size(args, server, zips[n], n))
    finally:
        server.stop()
    runs, repeated = [], {}
    for n in args.sizes:
        ranked = sorted(attempts[n], key=lambda run: run["without_spm_pairs_per_s"])
        runs.append(ranked[(len(ranked) - 1) // 2])  # the median (the lower one if even)
        repeated[str(n)] = [run["without_spm_pairs_per_s"] for run in ranked]
    _common.emit(
        {
            "benchmark": "prep_speed",
            "job": JOB,
            "machine": machine,
            "params": {
                "lang": args.lang,
                "sizes": args.sizes,
                "vocab_size": args.vocab_size,
                "input_sentence_size": args.input_sentence_size,
                "threads": args.threads,
                "workers": args.workers,
                "seed": args.seed,
                "repeats": args.repeats,
                "zips": {str(n): str(p) for n, p in zips.items()},
            },
            "runs": runs,
            # every run's pairs/s without spm, per size, sorted (runs[] holds the median one)
            "without_spm_pairs_per_s_all_repeats": repeated,
            "targets": targets(args, runs, attempts),
            "loadavg_at_end": _common.loadavg(),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
