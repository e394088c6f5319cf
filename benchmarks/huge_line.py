"""`psp embed` of one huge line with no newline: peak resident memory and wall time.

The line is the German side of the en-de bitext, its sentences joined by spaces and repeated up
to the size asked, written on the fly into a temporary folder (never kept). Each size runs in a
fresh `psp embed` process (text -> `.npy`, default `--max-chars`) and its peak RSS is that
process's own (`wait4`), beside a one-sentence file's: the floor of imports and the model.
The goal: a 2 GB line under 1 GB resident.

    python benchmarks/huge_line.py [--sizes 200000000,2000000000]

`--quick`: a 20 MB line and the quick bundle. Run it with `PYTHONPATH` on an older checkout to
measure that checkout's `psp` (there, keep to sizes that fit in memory).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import embed_corpus

PSP = Path(sys.executable).with_name("psp")
GOAL_BYTES = 1 << 30


def write_line(path: Path, sentences: list[str], size: int) -> None:
    """``size`` bytes of ``sentences`` joined by spaces, cycled, and no newline."""
    block = " ".join(sentences).encode("utf-8") + b" "
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        tail = block[: size % len(block)]
        handle.write(tail.decode("utf-8", errors="ignore").encode("utf-8"))


def run_embed(source: Path, bundle: Path, output: Path, log: Path) -> dict:
    """One ``psp embed`` process: wall seconds, its own peak RSS, its exit code and summary."""
    command = [str(PSP), "embed", "--sentence-file", str(source), "--model", str(bundle)]
    command += ["--output-file", str(output), "--threads", "1"]
    started = time.perf_counter()
    with open(log, "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    text = log.read_text(errors="replace")
    summary = re.findall(r"(wrote .*|psp: error: .*)", text)
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "exit_code": os.waitstatus_to_exitcode(status),
        "summary": summary[-1] if summary else text[-500:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_data_arguments(parser)
    parser.add_argument(
        "--sizes",
        default="200000000,2000000000",
        help="line sizes in bytes, comma-separated (default 200 MB and 2 GB)",
    )
    parser.add_argument("--model", help="a bundle to use (default: the 50k, dim 1024 one built)")
    _common.add_quick_argument(parser, "one 20 MB line, the quick bundle")
    args = parser.parse_args()
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    sizes = [20_000_000] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    bundle = embed_corpus.bundle_for(args, 50_000, 1024)
    _, german = _common.read_bitext(args.data_dir, "de", 2000)
    result = {"benchmark": "huge_line", "model": str(bundle), "machine": _common.machine_info()}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="huge-line-", dir=args.results_dir) as work:
        work = Path(work)
        floor = work / "one-sentence.txt"
        floor.write_text(german[0] + "\n", encoding="utf-8")
        result["one_sentence"] = run_embed(floor, bundle, work / "floor.npy", work / "log")
        result["lines"] = {}
        for size in sizes:
            source = work / "line.txt"
            write_line(source, german, size)
            measured = run_embed(source, bundle, work / "vectors.npy", work / "log")
            measured["under_1_gb"] = measured["peak_rss_mb"] * (1 << 20) < GOAL_BYTES
            result["lines"][str(size)] = measured
            _common.log.info("%d bytes: %s", size, measured)
            source.unlink()
    _common.emit(result)


if __name__ == "__main__":
    main()
