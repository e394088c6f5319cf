"""Corpus preparation speed (pairs/s end to end and per stage) and peak RSS, from moses zip to HDF5.

For each corpus size (default 1M and 4M pairs) a local OPUS-style moses zip
(``Bench.de-en.en`` / ``Bench.de-en.de``) is built once from the real en-de bitext and cached
under ``--results-dir``: the 95k pairs are resampled as concatenated seeded permutations, and
every copy after the first has the words of each side shuffled (seeded), so the pairs stay
distinct and deduplication has real work instead of collapsing the corpus back to 95k pairs;
short sentences (few word orders) still give some duplicates.

Each chain runs in a fresh child process (so its peak RSS is its own); with ``--repeats N`` the
sizes take turns for N rounds (every other round in reverse order), so that the slow phases of a
shared machine fall on every size alike, and the median chain of each size is reported. A
chain is ``read_moses_zip_batches`` into the raw pair file, then :func:`ops.prepare.prepare_corpus`
(langid -> filters -> dedup -> shuffle -> sentencepiece -> encode+pack). The child reports every
stage's seconds and counts, ``ru_maxrss`` and ``VmHWM``.

Sentencepiece training costs what ``--input-sentence-size`` and ``--vocab-size`` say, not what
the corpus size says, so it is reported on its own line and the end-to-end figure is given with
and without it. The defaults (vocab 16,000 on a 200,000-sentence sample) keep the whole run to
about 10 minutes on 2 idle cores; the paper's settings are ``--vocab-size 50000
--input-sentence-size 10000000``.

Targets (2 cores): >= 25,000 pairs/s end to end (without sentencepiece training); the largest
size within 4 +/- 0.4x the time of the smallest per 4x pairs (time scaled to the size ratio);
peak RSS under 1.5 GB.

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

TARGET_PAIRS_PER_S = 25_000
TARGET_RSS_MIB = 1536
TARGET_LINEARITY = 0.10  # time ratio within (size ratio) * (1 +/- 0.1)
CORPUS_NAME = "Bench"

log = _common.log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=_common.DEFAULT_DATA_DIR)
    parser.add_argument("--results-dir", type=Path, default=_common.DEFAULT_RESULTS_DIR)
    parser.add_argument("--sizes", default="1000000,4000000", help="comma-separated pair counts")
    parser.add_argument("--lang", default="de")
    parser.add_argument("--vocab-size", type=int, default=16_000)
    parser.add_argument("--input-sentence-size", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=2, help="sentencepiece threads")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="processes for language ID and for encoding (fastText and each encoder use one core)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of one chain per size (sizes alternate); the chain with the median pairs/s "
        "(without spm) of each size is reported",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20k and 80k pairs, vocab 2,000"
    )
    parser.add_argument("--verbose", action="store_true")
    # internal: one measured chain in this (child) process
    parser.add_argument("--child-zip", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-work-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.vocab_size, args.input_sentence_size = "20000,80000", 2_000, 40_000
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
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


# --------------------------------------------------------------------------------------------
# one measured chain (child process)


def peak_rss_mib() -> dict:
    result = {"ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    if (vmhwm := _status_mib("VmHWM")) is not None:
        result["vmhwm_mib"] = vmhwm
    return result


def _status_mib(field: str) -> int | None:
    kb = _common.status_kb(field)
    return None if kb is None else round(kb / 1024)


def _reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        pass


STAGE_FUNCTIONS = (
    "filter_language",
    "filter_pairs",
    "deduplicate",
    "segment_pairs",
    "shuffle_pairs",
    "train_sentencepiece_from_pairs",
    "encode_and_pack",
)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (language-ID workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def record_stage_memory(module, memory: dict) -> None:
    """Wrap the chain's stage functions in ``module`` to record, per stage, the RSS before it,
    its own peak (VmHWM reset at its start) and its CPU seconds (worker processes included)."""
    for name in STAGE_FUNCTIONS:
        original = getattr(module, name)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            before = _status_mib("VmRSS")
            _reset_peak_rss()
            cpu = _cpu_seconds()
            result = _original(*args, **kwargs)
            memory[_name] = {
                "rss_before_mib": before,
                "peak_mib": _status_mib("VmHWM"),
                "cpu_s": round(_cpu_seconds() - cpu, 3),
            }
            return result

        setattr(module, name, wrapped)


def library_floor(work_dir: Path, n_pairs: int = 16_384, repeats: int = 3) -> dict:
    """CPU seconds per pair, on one core, of the library work the chain cannot do without;
    best of ``repeats``. Language ID as the chain does it (``predict_label_ids``, batched, its
    token cache warmed on the same pairs first: the steady state of a long run), with fastText's
    own ``predict`` on the same lines for reference, and sentencepiece ``Encode`` (1 thread) on
    both deduplicated sides. With 2 cores, ``2 / (langid + sentencepiece)`` is the most pairs
    per second a chain built on them can reach on this machine, at this moment."""
    from ops.encoding import packing_tokenizer
    from ops.langid import LanguageIdentifier
    from ops.pair_files import iter_pair_batches

    raw = next(iter_pair_batches(work_dir / "raw.parquet", n_pairs))
    lowered = next(iter_pair_batches(work_dir / "shuffle.parquet", n_pairs))
    identifier = LanguageIdentifier()
    fasttext_only = LanguageIdentifier(batched=False)
    tokenizer = packing_tokenizer(work_dir / "spm.model", num_threads=1)
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
    import ops.prepare
    from ops.langid import LanguageIdentifier
    from ops.moses_zip import read_moses_zip_batches
    from ops.pair_files import PairWriter
    from ops.prepare import prepare_corpus
    from ops.stage_report import StageReport

    stage_memory: dict = {}
    record_stage_memory(ops.prepare, stage_memory)

    work_dir = args.child_work_dir
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    cpu_started = _cpu_seconds()
    read_report = StageReport("read")
    raw = work_dir / "raw.parquet"
    with PairWriter(raw, src_lang="en", tgt_lang=args.lang, background=True) as writer:
        batches = read_moses_zip_batches(
            args.child_zip,
            corpus=CORPUS_NAME,
            src_lang="en",
            tgt_lang=args.lang,
            report=read_report,
        )
        for src, tgt in batches:
            writer.write(src, tgt)
        n_raw = writer.n_pairs
    read_seconds = time.perf_counter() - started
    identifier = LanguageIdentifier()
    prepared = prepare_corpus(
        raw,
        work_dir,
        lang=args.lang,
        kind="bitext",
        identifier=identifier,
        vocab_size=args.vocab_size,
        input_sentence_size=args.input_sentence_size,
        seed=args.seed,
        num_threads=args.threads,
        workers=args.workers,
    )
    total = time.perf_counter() - started
    stages = {"read": {"n_out": n_raw, "seconds": round(read_seconds, 3)}}
    stages.update({name: report.as_dict() for name, report in prepared.reports.items()})
    record = {
        "pairs": n_raw,
        "seconds_total": round(total, 3),
        "cpu_seconds": round(_cpu_seconds() - cpu_started, 3),
        "stages": stages,
        "skipped": prepared.skipped,
        "hdf5_mib": round(prepared.training_file.stat().st_size / 2**20, 1),
        "stage_memory": stage_memory,
        **peak_rss_mib(),
        "library_floor": library_floor(work_dir),
    }
    sys.stdout.write("PREP_RESULT " + json.dumps(record) + "\n")
    return 0


def run_size(args: argparse.Namespace, zip_path: Path, n_pairs: int) -> dict:
    work_dir = args.results_dir / f"tmp-prep-{n_pairs}-{os.getpid()}"
    shutil.rmtree(work_dir, ignore_errors=True)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child-zip",
        str(zip_path),
        "--child-work-dir",
        str(work_dir),
        "--lang",
        args.lang,
        "--vocab-size",
        str(args.vocab_size),
        "--input-sentence-size",
        str(args.input_sentence_size),
        "--threads",
        str(args.threads),
        "--workers",
        str(args.workers),
        "--seed",
        str(args.seed),
    ] + (["--verbose"] if args.verbose else [])
    log.info("size %d: running the chain in a child process (%s)", n_pairs, work_dir)
    try:
        # the child imports ``ops`` from this checkout, not from wherever the package is installed
        python_path = os.pathsep.join(
            filter(None, [str(_common.REPO_ROOT), os.environ.get("PYTHONPATH")])
        )
        completed = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": python_path},
        )
    finally:
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("PREP_RESULT ")]
    if completed.returncode or not lines:
        raise SystemExit(f"the child run for {n_pairs} pairs failed (exit {completed.returncode})")
    record = json.loads(lines[-1][len("PREP_RESULT ") :])
    return summarize(record)


def summarize(record: dict) -> dict:
    pairs = record["pairs"]
    stages = record["stages"]
    spm_seconds = stages.get("spm", {}).get("seconds", 0.0)
    without_spm = record["seconds_total"] - spm_seconds
    per_stage = {
        name: {
            "seconds": stage["seconds"],
            **(
                {"pairs_in_per_s": round(stage.get("n_in", stage["n_out"]) / stage["seconds"])}
                if stage["seconds"] and name != "spm"
                else {}
            ),
            **({"n_in": stage["n_in"]} if "n_in" in stage else {}),
            "n_out": stage["n_out"],
            **({"dropped": stage["dropped"]} if stage.get("dropped") else {}),
        }
        for name, stage in stages.items()
    }
    slowest = max(
        (name for name in stages if name != "spm"), key=lambda name: stages[name]["seconds"]
    )
    return {
        "pairs": pairs,
        "end_to_end_s": record["seconds_total"],
        "end_to_end_pairs_per_s": round(pairs / record["seconds_total"]),
        "without_spm_s": round(without_spm, 3),
        "without_spm_pairs_per_s": round(pairs / without_spm),
        "spm_training_s": spm_seconds,
        # model loading, worker start-up: the part of end_to_end_s outside every stage
        "outside_stages_s": round(
            record["seconds_total"] - sum(stage["seconds"] for stage in stages.values()), 3
        ),
        "cpu_per_wall": round(record["cpu_seconds"] / record["seconds_total"], 2),
        "slowest_stage_without_spm": slowest,
        "stages": per_stage,
        "hdf5_mib": record["hdf5_mib"],
        # the per-stage VmHWM resets can hide earlier peaks from ru_maxrss: take the larger
        "ru_maxrss_mib": max(
            [record["ru_maxrss_mib"]]
            + [m["peak_mib"] or 0 for m in record.get("stage_memory", {}).values()]
        ),
        "stage_memory_mib": record.get("stage_memory", {}),
        # measured after the chain, in the same process: see library_floor
        "library_floor": record["library_floor"],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.setup_logging(args.verbose)
    logging.getLogger("ops").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.child_zip is not None:
        return child(args)
    if _common.require_data(args.data_dir, "bitext", f"en-{args.lang}") is None:
        return 0
    machine = _common.machine_info()
    cache_dir = args.results_dir / "prep_speed"
    zips = {n: build_zip(args.data_dir, cache_dir, args.lang, n, args.seed) for n in args.sizes}
    # the sizes take turns (and every other round in reverse order), so that a slow phase of
    # this shared machine falls on all sizes alike instead of on the repeats of one size
    attempts: dict[int, list[dict]] = {n: [] for n in args.sizes}
    for round_ in range(max(1, args.repeats)):
        for n in args.sizes if round_ % 2 == 0 else args.sizes[::-1]:
            attempts[n].append(run_size(args, zips[n], n))
    runs, repeated = [], {}
    for n in args.sizes:
        ranked = sorted(attempts[n], key=lambda run: run["without_spm_pairs_per_s"])
        runs.append(ranked[(len(ranked) - 1) // 2])  # the median (the lower one if even)
        repeated[str(n)] = [run["without_spm_pairs_per_s"] for run in ranked]

    smallest, largest = runs[0], runs[-1]
    size_ratio = largest["pairs"] / smallest["pairs"]
    time_ratio = largest["without_spm_s"] / smallest["without_spm_s"]
    # the same ratio within each round (runs next to each other in time), for the spread
    round_ratios = [
        round(big["without_spm_s"] / small["without_spm_s"], 3)
        for small, big in zip(attempts[args.sizes[0]], attempts[args.sizes[-1]], strict=True)
    ]
    targets = {
        "pairs_per_s_without_spm": {
            "target": TARGET_PAIRS_PER_S,
            "value": min(r["without_spm_pairs_per_s"] for r in runs),
            "passed": all(r["without_spm_pairs_per_s"] >= TARGET_PAIRS_PER_S for r in runs),
        },
        "pairs_per_s_with_spm": {
            "target": TARGET_PAIRS_PER_S,
            "value": min(r["end_to_end_pairs_per_s"] for r in runs),
            "passed": all(r["end_to_end_pairs_per_s"] >= TARGET_PAIRS_PER_S for r in runs),
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
        "peak_rss_mib": {
            "target_below": TARGET_RSS_MIB,
            "values": [r["ru_maxrss_mib"] for r in runs],
            "passed": all(r["ru_maxrss_mib"] < TARGET_RSS_MIB for r in runs),
        },
    }
    _common.emit(
        {
            "benchmark": "prep_speed",
            "machine": machine,
            "params": {
                "lang": args.lang,
                "sizes": args.sizes,
                "vocab_size": args.vocab_size,
                "input_sentence_size": args.input_sentence_size,
                "spm_threads": args.threads,
                "workers": args.workers,
                "seed": args.seed,
                "repeats": args.repeats,
                "zips": {str(n): str(p) for n, p in zips.items()},
            },
            "runs": runs,
            # every chain's pairs/s without spm, per size, sorted (runs[] holds the median one)
            "without_spm_pairs_per_s_all_repeats": repeated,
            "targets": targets,
            "loadavg_at_end": _common.loadavg(),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
