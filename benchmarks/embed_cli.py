"""``psp embed`` on corpora as people keep them: speed of a first pass through the command line,
and memory on 10 million sentences.

Two parts, each ``psp embed`` run as the user runs it (a fresh process, its wall time from start
to exit: loading the model, counting the records, reading, embedding, writing; the first pass
also reports psp's own figure *after loading*, from the model loaded to the output on disk,
which it logs):

* ``first_pass``: the distinct corpus of ``embed_corpus.py`` (247,325 distinct sentences of the
  shared bitext, each seen once) as text to ``.npy``, as JSON Lines (``{"id", "text"}``) to
  Parquet with the ids, and as a Parquet column to Parquet with the ids; model: the bundle of
  ``embed_corpus.py`` (vocabulary 20k, dim 1024), one thread. Beside them, in the same rounds,
  the library's first pass in a fresh process (``embed_corpus.py``'s ``default`` worker: model
  loaded and corpus read before the clock starts). Rounds take turns; medians reported.
* ``memory``: the same corpus cycled to ``--lines`` (default 10,000,000) lines, so repeated
  sentences after the first 247,325: text to ``.npy``, JSON Lines to Parquet, Parquet to Parquet,
  with ``--dim 64`` (a Matryoshka prefix; 2.6 GB of output instead of 41 GB). Peak RSS of the
  ``psp`` process (``wait4``'s ``ru_maxrss``), beside the same at a tenth of the lines: bounded
  memory means the two peaks are about equal.

Prints one JSON object on stdout; logs go to stderr. Needs ../shared/data (skips without it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common
import embed_corpus

log = _common.log

PSP = Path(sys.executable).with_name("psp")
FORMATS = {  # name: (input suffix, output suffix, extra arguments)
    "text_to_npy": (".txt", ".npy", []),
    "jsonl_to_parquet": (".jsonl", ".parquet", ["--id-field", "id"]),
    "parquet_to_parquet": (".parquet", ".parquet", ["--id-field", "id"]),
}
#: first-pass paths beside FORMATS: both cores
FIRST_PASS_EXTRA = {"text_to_npy_2_workers": (".txt", ".npy", ["--workers", "2"])}


def write_inputs(corpus: Path, lines: int, folder: Path, tag: str) -> dict[str, Path]:
    """The corpus cycled to ``lines`` lines, as text, JSON Lines and Parquet (made once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sentences = corpus.read_text(encoding="utf-8").splitlines()
    paths = {suffix: folder / f"corpus-{tag}{suffix}" for suffix in (".txt", ".jsonl", ".parquet")}
    if all(p.is_file() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    block = 100_000

    def blocks():
        for start in range(0, lines, block):
            ids = range(start, min(start + block, lines))
            yield ids, [sentences[i % len(sentences)] for i in ids]

    tmp = {suffix: p.with_name(p.name + f".tmp-{os.getpid()}") for suffix, p in paths.items()}
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    with (
        open(tmp[".txt"], "w", encoding="utf-8") as text,
        open(tmp[".jsonl"], "w", encoding="utf-8") as jsonl,
        pq.ParquetWriter(tmp[".parquet"], schema) as parquet,
    ):
        for ids, texts in blocks():
            text.write("".join(t + "\n" for t in texts))
            jsonl.write(
                "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                        for i, t in zip(ids, texts, strict=True))
            )  # fmt: skip
            parquet.write_table(pa.table({"id": list(ids), "text": texts}, schema=schema))
    for suffix, path in paths.items():
        os.replace(tmp[suffix], path)
    return paths


def run_psp(argv: list[str]) -> dict:
    """Run ``psp`` to completion; its wall seconds and peak RSS (MB)."""
    started = time.perf_counter()
    process = subprocess.Popen([str(PSP), *argv], stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stderr = process.stderr.read().decode(errors="replace")
    process.stdout.close()
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"psp {argv} failed ({process.returncode}):\n{stderr[-3000:]}")
    after_loading = re.search(r"embeddings to .* in ([0-9.]+) s \(([0-9]+) sentences/s", stderr)
    return {
        "seconds": seconds,
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        # psp's own figure: from the model loaded to the output on disk (read, embed, write)
        "after_loading_per_second": int(after_loading.group(2)) if after_loading else None,
    }


def embed_argv(bundle: Path, source: Path, output: Path, extra: list[str]) -> list[str]:
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle)]
    return [*argv, "--output-file", str(output), "--threads", "1", *extra]


def first_pass(args, corpus: Path, bundle: Path, work: Path) -> dict:
    inputs = write_inputs(corpus, sum(1 for _ in open(corpus, "rb")), args.results_dir, "distinct")
    count = sum(1 for _ in open(inputs[".txt"], "rb"))
    chosen = args.first_pass_paths.split(",")
    paths = {k: v for k, v in {**FORMATS, **FIRST_PASS_EXTRA}.items() if k in chosen}
    library = ["library"] if "library" in chosen else []
    rates: dict[str, list[float]] = {name: [] for name in [*paths, *library]}
    after_loading: dict[str, list[float]] = {name: [] for name in paths}
    plan = list(rates)
    for index in range(args.rounds):
        for name in plan[index % len(plan) :] + plan[: index % len(plan)]:
            if name == "library":
                result = embed_corpus.run_worker(
                    ["--worker", "default", "--model", str(bundle), "--corpus", str(corpus)]
                    + ["--passes", "1"]
                )
                rate = result["sentences"] / result["seconds"][0]
            else:
                source_suffix, output_suffix, extra = paths[name]
                output = work / f"vectors{output_suffix}"
                result = run_psp(embed_argv(bundle, inputs[source_suffix], output, extra))
                output.unlink()
                rate = count / result["seconds"]
                after_loading[name].append(result["after_loading_per_second"])
            rates[name].append(rate)
            log.info("round %d %s: %.0f sentences/s", index + 1, name, rate)
    return {
        "workload": f"{count} distinct sentences, one pass, psp embed in a fresh process "
        "(wall time: start, imports, load, count, read, embed, write; after_loading: psp's own "
        "figure from the model loaded to the output on disk); library: embedding only, the "
        "corpus in memory",
        "sentences": count,
        "paths": {
            name: {
                "per_round": [round(r) for r in values],
                "median": round(statistics.median(values)),
                **(
                    {
                        "after_loading_per_round": after_loading[name],
                        "after_loading_median": round(statistics.median(after_loading[name])),
                    }
                    if name in after_loading
                    else {}
                ),
            }
            for name, values in rates.items()
        },
    }


def memory(args, corpus: Path, bundle: Path, work: Path) -> dict:
    results = {}
    for lines in (args.lines // 10, args.lines):
        inputs = write_inputs(corpus, lines, args.results_dir, f"cycled-{lines}")
        for name, (source_suffix, output_suffix, extra) in FORMATS.items():
            if name not in args.formats.split(","):
                continue
            output = work / f"vectors{output_suffix}"
            result = run_psp(
                embed_argv(bundle, inputs[source_suffix], output, [*extra, "--dim", "64"])
            )
            result["output_mb"] = round(output.stat().st_size / 2**20)
            output.unlink()
            result["sentences_per_second"] = round(lines / result["seconds"])
            result["seconds"] = round(result["seconds"], 1)
            results.setdefault(name, {})[str(lines)] = result
            log.info("%s, %d lines: %s", name, lines, result)
        if not args.keep_inputs and lines == args.lines:
            for path in inputs.values():
                path.unlink()
    return {
        "workload": f"the distinct corpus cycled to {args.lines // 10} and {args.lines} lines "
        "(repeated sentences after the first pass), --dim 64, one thread",
        "runs": results,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--parts", default="first_pass,memory")
    parser.add_argument("--keep-inputs", action="store_true", help="keep the --lines inputs")
    parser.add_argument("--formats", default=",".join(FORMATS), help="of the memory part")
    parser.add_argument(
        "--first-pass-paths",
        default=",".join([*FORMATS, *FIRST_PASS_EXTRA, "library"]),
        help="of the first-pass part",
    )
    _common.add_quick_argument(
        parser,
        "embed_corpus.py's quick corpus and bundle, one round of Parquet to Parquet, memory "
        "on 200 and 2,000 lines of text to .npy",
    )
    args = parser.parse_args(argv)
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    if args.quick:
        args.rounds, args.lines = 1, 2000
        args.first_pass_paths, args.formats = "parquet_to_parquet", "text_to_npy"
    corpus, bundle = embed_corpus.corpus_and_bundle(args, 20_000, 1024)
    work = args.results_dir / "embed-cli-work"
    work.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": "embed_cli", "model": str(bundle), "machine": _common.machine_info()}
    parts = args.parts.split(",")
    if "first_pass" in parts:
        result["first_pass"] = first_pass(args, corpus, bundle, work)
    if "memory" in parts:
        result["memory"] = memory(args, corpus, bundle, work)
    result["loadavg_at_end"] = _common.loadavg()
    _common.emit(result)


if __name__ == "__main__":
    main()
