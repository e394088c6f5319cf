"""Embedding without torch: the implementations of the sentence means, a corpus seen once, and
``psp embed`` of one line.

A plain ``pip install`` of the project has no torch (it comes with the ``[train]`` extra), so
``psp_core.inference.fast.pooling`` sums each sentence's rows with the package's compiled loop, or
scipy or numpy where it was not built; torch only where torch is already imported or more than
one thread is asked (the ``torch`` path below imports it first). Four measurements, each path (but the sweep's) in
processes of its own, taking turns round by round (``--rounds``, median reported):

* ``pooling``: ``weighted_sums`` alone, each implementation on the same 16,384 sentences of 25
  ids drawn at random from a 20k vocabulary, a random float32 table of dim 1024, 1 thread,
  batches of 256 (as ``embed`` calls it); plus numpy's gather with ``np.add.reduceat`` for
  comparison (not an implementation of the package: far slower);
* ``cold_corpus``: ``benchmarks/embed_corpus.py``'s default path (a fresh process embeds the
  distinct corpus once, then again; its vocab-20k dim-1024 bundle), with torch installed, then
  with torch made unimportable (the compiled loop: a plain install), then with the compiled
  loop unimportable too (scipy: a plain install where nothing could be compiled), then with
  scipy unimportable as well (numpy);
* ``kernel_sweep``: the compiled loop (``psp_core/inference/fast/_sums.c``) built here with other
  column blocks and prefetch distances (``KERNEL_VARIANTS``; a block as wide as the table is
  no blocking), each against torch on the pooling workload, in one process taking turns;
* ``one_line``: the wall time (and CPU time) of ``psp embed`` of one line, and of the corpus'
  first thousand, into an ``.npy`` (the whole command: interpreter start, imports, model
  loading, writing) with the full install, and with torch and
  pandas made unimportable as in a plain install (pyarrow imports pandas where it is
  installed); with ``--light-venv DIR``, also ``DIR/bin/psp`` of a real plain install (``python
  -m venv DIR && DIR/bin/pip install .``).

A module (and its submodules) is made unimportable in the child process only, by a finder placed
first on ``sys.meta_path`` (see ``BLOCKER``): the code under test runs unchanged and meets the same
``ImportError`` a plain install gives.

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common
import embed_corpus

log = _common.log

#: python -c BLOCKER MODULES SCRIPT|-m MODULE ARGS...: run a script or a module with the
#: comma-separated MODULES (and their submodules) unimportable, but those written +NAME, which
#: are imported first (as a caller's own code or training would have)
BLOCKER = """
import os, runpy, sys
named = list(filter(None, sys.argv[1].split(",")))
blocked = {b for b in named if not b.startswith("+")}
for loaded in (b[1:] for b in named if b.startswith("+")):
    __import__(loaded)
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {name!r} (made unimportable)", name=name)
sys.meta_path.insert(0, Blocked())
if sys.argv[2] == "-m":
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))  # (as python SCRIPT does)
    runpy.run_path(sys.argv[0], run_name="__main__")
"""
#: the cold-corpus and one-line paths: the modules each makes unimportable
COMPILED = "psp_core.inference.fast._sums"
COLD_PATHS = {
    "torch": "+torch",  # (sums take torch where it is already imported)
    "compiled": "torch",
    "scipy": f"torch,{COMPILED}",
    "numpy": f"torch,{COMPILED},scipy",
}
ONE_LINE_PATHS = {"full_install": "", "without_torch_and_pandas": "torch,pandas"}
GOAL_VS_TORCH = 0.9
GOAL_ONE_LINE_S = 0.6
#: psp embed of a thousand lines with the full install, at most this times a plain install's
GOAL_THOUSAND_LINES_RATIO = 1.2


def blocked_command(blocked: str, *argv: str) -> list[str]:
    return [sys.executable, "-c", BLOCKER, blocked, *argv]


# --- pooling ------------------------------------------------------------------------------------


def pooling_workload(args: argparse.Namespace) -> dict:
    """``args.sentences`` sentences of 25 random ids of ``args.vocab_size``, weighted 1/25, a
    random float32 table of ``args.dim``, and the output array."""
    import numpy as np

    rng = np.random.default_rng(0)
    table = rng.standard_normal((args.vocab_size, args.dim), dtype=np.float32)
    count, length = args.sentences, 25
    ids = rng.integers(0, args.vocab_size, count * length, dtype=np.int64)
    offsets = np.arange(0, count * length + 1, length, dtype=np.int64)
    weights = np.full(len(ids), 1 / length, dtype=np.float32)
    out = np.empty((count, args.dim), dtype=np.float32)
    return {"table": table, "ids": ids, "offsets": offsets, "weights": weights, "out": out}


def sum_in_batches(sums, workload: dict) -> None:
    """``sums`` over the workload in batches of ``embed``'s size, as ``embed`` calls it."""
    offsets, ids, weights, out = (workload[k] for k in ("offsets", "ids", "weights", "out"))
    count = len(offsets) - 1
    for start in range(0, count, embed_corpus.BATCH_SIZE):
        stop = min(start + embed_corpus.BATCH_SIZE, count)
        low, high = offsets[start], offsets[stop]
        bag = offsets[start : stop + 1] - low
        sums(workload["table"], ids[low:high], bag, weights[low:high], out[start:stop])


def pooling_worker(args: argparse.Namespace) -> dict:
    """Time one implementation of ``weighted_sums`` (``args.path``) on the random workload."""
    import numpy as np

    from psp_core.inference.fast import pooling

    pooling.set_threads(1)
    workload = pooling_workload(args)
    if args.path == "numpy_reduceat":
        sums = _reduceat_sums
    else:
        sums = pooling.IMPLEMENTATIONS[args.path][1]
    seconds, cpu_seconds = [], []
    for _ in range(args.passes):
        started, cpu_started = time.perf_counter(), time.process_time()
        sum_in_batches(sums, workload)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
    reference = pooling.IMPLEMENTATIONS["numpy"][1]
    check = np.empty((16, args.dim), dtype=np.float32)
    first = workload["offsets"][16]
    reference(workload["table"], workload["ids"][:first], workload["offsets"][:17],
              workload["weights"][:first], check)  # fmt: skip
    return {
        "sentences": args.sentences,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "max_abs_difference": float(np.abs(workload["out"][:16] - check).max()),
    }


def _reduceat_sums(table, ids, offsets, weights, out) -> None:
    import numpy as np

    rows = table[ids]
    rows *= weights[:, None]
    out[:] = np.add.reduceat(rows, offsets[:-1], axis=0)


# --- the compiled loop's block and prefetch distance ---------------------------------------------

#: (columns summed in registers at a time, ids ahead whose rows are prefetched): the shipped
#: choice first
KERNEL_VARIANTS = ((64, 4), (64, 2), (64, 8), (32, 4), (128, 4), (256, 8), (1024, 4), (1024, 1))


def build_kernel(block: int, prefetch: int, folder: Path):
    """``_sums.c`` compiled with ``BLOCK`` and ``PREFETCH`` set, imported from ``folder``."""
    import importlib.util
    import os
    import sysconfig

    from psp_core.inference.fast import pooling

    source = Path(pooling.__file__).with_name("_sums.c")
    target = folder / f"block{block}-ahead{prefetch}"
    target.mkdir(parents=True, exist_ok=True)
    library = target / f"_sums{sysconfig.get_config_var('EXT_SUFFIX')}"
    flags = ["-O3", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}"]
    flags += [f"-DBLOCK={block}", f"-DPREFETCH={prefetch}"]
    compiler = os.environ.get("CC", "cc")
    subprocess.run([compiler, *flags, str(source), "-o", str(library)], check=True)
    spec = importlib.util.spec_from_file_location("_sums", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_sweep(args: argparse.Namespace, folder: Path) -> dict:
    """Sentences/s of each ``KERNEL_VARIANTS`` build and of torch, medians of ``args.rounds``
    rounds taking turns (1 thread, the pooling workload)."""
    import torch

    from psp_core.inference.fast import pooling

    torch.set_num_threads(1)
    workload = pooling_workload(args)
    paths = {"torch": pooling.IMPLEMENTATIONS["torch"][1]}
    for block, prefetch in KERNEL_VARIANTS[:2] if args.quick else KERNEL_VARIANTS:
        compiled = build_kernel(block, prefetch, folder)
        paths[f"block {block}, {prefetch} ahead"] = compiled.weighted_sums
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(1 if args.quick else max(args.rounds, 3) * 2 + 1):
        for name, sums in paths.items():
            started = time.perf_counter()
            sum_in_batches(sums, workload)
            rates[name].append(args.sentences / (time.perf_counter() - started))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        name: {"median": round(rate), "vs_torch": round(rate / medians["torch"], 3)}
        for name, rate in medians.items()
    }


# --- one line -----------------------------------------------------------------------------------


def one_line_seconds(command: list[str], workdir: Path) -> tuple[float, float]:
    """The wall time of ``command`` and the CPU time (user + system) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(f"{command} failed:\n{completed.stderr[-3000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu


def one_line_commands(args: argparse.Namespace, corpus: Path, bundle: Path, workdir: Path) -> dict:
    """``psp embed`` of one line, and of the corpus' first thousand lines (``1000_lines/...``),
    by each install."""
    (workdir / "one.txt").write_text("A sentence to embed.\n", encoding="utf-8")
    with corpus.open(encoding="utf-8") as lines:
        thousand = "".join(line for _, line in zip(range(1000), lines, strict=False))
    (workdir / "thousand.txt").write_text(thousand, encoding="utf-8")
    commands = {}
    for prefix, text in (("", "one"), ("1000_lines/", "thousand")):
        embed = ["embed", "--sentence-file", f"{text}.txt", "--model", str(bundle)]
        embed += ["--output-file", f"{text}.npy"]
        for name, blocked in ONE_LINE_PATHS.items():
            commands[prefix + name] = blocked_command(blocked, "-m", "psp_core.cli", *embed)
        if args.light_venv:
            light = [str(Path(args.light_venv) / "bin" / "psp"), *embed]
            commands[f"{prefix}plain_install_venv"] = light
    return commands


# --- the run ------------------------------------------------------------------------------------


def run_json(command: list[str]) -> dict:
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"worker {command[3:]} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def plan(args: argparse.Namespace, corpus: Path, bundle: Path) -> dict[str, list[str]]:
    """Each measured path's command (a fresh process each time)."""
    commands = {}
    pooling_argv = ["--sentences", str(args.sentences), "--dim", str(args.dim)]
    pooling_argv += ["--vocab-size", str(args.vocab_size)]
    for path, blocked in {**COLD_PATHS, "numpy_reduceat": ""}.items():
        argv = [__file__, "--pooling-worker", path, *pooling_argv]
        commands[f"pooling/{path}"] = blocked_command(blocked, *argv)
    script = str(Path(embed_corpus.__file__))
    worker = ["--worker", "default", "--model", str(bundle), "--corpus", str(corpus)]
    for path, blocked in COLD_PATHS.items():
        commands[f"cold_corpus/{path}"] = blocked_command(blocked, script, *worker)
    return commands


def summarize(rounds: dict[str, list], one_line: dict[str, list[tuple[float, float]]]) -> dict:
    summary: dict = {"pooling": {}, "cold_corpus": {}, "one_line_seconds": {}}
    for name, results in rounds.items():
        group, path = name.split("/")
        # (pooling: the second pass, its module imported; a corpus: the first, as a user's)
        index = -1 if group == "pooling" else 0
        rates = [r["sentences"] / r["seconds"][index] for r in results]
        entry = {"per_round": [round(x) for x in rates], "median": round(statistics.median(rates))}
        # per CPU second of the process: steadier than wall time on a loaded machine
        cpu_rates = [
            r["sentences"] / r["cpu_seconds"][index] for r in results if "cpu_seconds" in r
        ]
        if cpu_rates:
            entry["per_cpu_second_median"] = round(statistics.median(cpu_rates))
        if group == "pooling":
            entry["max_abs_difference"] = max(r["max_abs_difference"] for r in results)
        summary[group][path] = entry
    for name, times in one_line.items():
        summary["one_line_seconds"][name] = {
            "per_round": [round(wall, 3) for wall, _ in times],
            "median": round(statistics.median(wall for wall, _ in times), 3),
            "cpu_median": round(statistics.median(cpu for _, cpu in times), 3),
        }
    goals = {}
    torch_entry = summary["cold_corpus"].get("torch")
    for path, entry in summary["cold_corpus"].items():
        if path == "torch":
            continue
        goals[f"cold_corpus_{path}_vs_torch"] = round(entry["median"] / torch_entry["median"], 3)
        if "per_cpu_second_median" in entry and "per_cpu_second_median" in torch_entry:
            ratio = entry["per_cpu_second_median"] / torch_entry["per_cpu_second_median"]
            goals[f"cold_corpus_{path}_vs_torch_per_cpu_second"] = round(ratio, 3)
    if "cold_corpus_compiled_vs_torch" in goals:  # (the plain install's path)
        goals["cold_corpus_compiled_within_10pct"] = (
            goals["cold_corpus_compiled_vs_torch"] >= GOAL_VS_TORCH
        )
    lines = summary["one_line_seconds"]
    for name, entry in lines.items():
        if not name.startswith("1000_lines/"):
            goals[f"one_line_{name}_under_0.6s"] = entry["median"] < GOAL_ONE_LINE_S
    full = lines.get("1000_lines/full_install")
    for plain in ("1000_lines/without_torch_and_pandas", "1000_lines/plain_install_venv"):
        if full and plain in lines:
            ratio = full["median"] / lines[plain]["median"]
            goals[f"thousand_lines_full_vs_{plain.split('/')[1]}"] = round(ratio, 3)
            goals[f"thousand_lines_full_within_20pct_of_{plain.split('/')[1]}"] = (
                ratio <= GOAL_THOUSAND_LINES_RATIO
            )
    summary["goals"] = goals
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=16_384, help="of the pooling workload")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--vocab-size", type=int, default=20_000)
    parser.add_argument("--light-venv", help="a virtual environment with a plain install")
    parser.add_argument("--one-line-repeats", type=int, default=5, help="per round")
    parser.add_argument(
        "--only",
        choices=["pooling", "cold_corpus", "kernel_sweep", "one_line"],
        help="one measurement alone",
    )
    _common.add_quick_argument(
        parser,
        "one round; pooling on 1,024 sentences of dim 64; two kernel variants; embed_corpus's "
        "quick corpus and bundle",
    )
    parser.add_argument("--pooling-worker", dest="path", help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.path:
        _common.emit(pooling_worker(args))
        return
    if args.quick:
        args.rounds, args.sentences, args.dim, args.one_line_repeats = 1, 1024, 64, 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    corpus, bundle = embed_corpus.corpus_and_bundle(args, 20_000, 1024)
    commands = plan(args, corpus, bundle)
    workdir = args.results_dir / "light-install-one-line"
    workdir.mkdir(parents=True, exist_ok=True)
    line_commands = one_line_commands(args, corpus, bundle, workdir)
    if args.only:
        commands = {k: v for k, v in commands.items() if k.startswith(f"{args.only}/")}
        line_commands = line_commands if args.only == "one_line" else {}
    machine = _common.machine_info()
    sweep = {}
    if args.only in (None, "kernel_sweep"):
        sweep = kernel_sweep(args, args.results_dir / "light-install-kernels")
        log.info("kernel sweep: %s", sweep)
    rounds: dict[str, list] = {name: [] for name in commands}
    one_line: dict[str, list[tuple[float, float]]] = {name: [] for name in line_commands}
    for round_index in range(args.rounds):
        for name, command in commands.items():
            rounds[name].append(run_json(command))
            log.info("round %d %s: %s", round_index + 1, name, rounds[name][-1]["seconds"])
        for _ in range(args.one_line_repeats):
            for name, command in line_commands.items():
                one_line[name].append(one_line_seconds(command, workdir))
        log.info("round %d one line: %s", round_index + 1, one_line)
    _common.emit(
        {
            "benchmark": "light_install",
            "corpus": str(corpus),
            "model": str(bundle),
            "pooling_workload": f"{args.sentences} sentences of 25 ids, vocab {args.vocab_size}, "
            f"dim {args.dim}, float32, 1 thread, batches of {embed_corpus.BATCH_SIZE}",
            "machine": machine,
            "loadavg_at_end": _common.loadavg(),
            **summarize(rounds, one_line),
            "kernel_sweep": sweep,
        }
    )


if __name__ == "__main__":
    main()
