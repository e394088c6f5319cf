"""Embedding a corpus the way users do: distinct sentences, one pass, in a fresh process.

The corpus: every distinct sentence (compared lowercased) of the shared bitext's English sides
(all seven language pairs) and the German side of en-de, shuffled with a fixed seed (247,325
sentences on the shared data, 19.4 words on average). The model: ``--model`` (for example the
``make run`` German demo bundle, runs/psp_data/de/psp_model/model), or by default a bundle of the
same shape built here: a 20k sentencepiece model of the lowercased en-de bitext and a random
float32 table of dim 1024 (speed does not depend on the values).

Each measurement is a fresh Python process that loads the model and reads the corpus (not
timed), then embeds the whole corpus once (``first_pass``) and once more (``second_pass``),
tokenization included, with ``batch_size`` 256. The paths, in the same run and taking turns
round by round (``--rounds``, median reported):

* ``default``: ``load_model(path)`` as shipped;
* ``word_sums_off``: ``load_model(path, word_vector_bytes=0)``;
* ``cache_off``: ``load_model(path, word_cache_size=0)`` (sentencepiece per sentence);
* ``model2vec`` / ``sentence_transformers``: the same bundle exported (``psp_core.models.export``) and
  run by those libraries (``StaticModel.encode``, ``SentenceTransformer.encode``), when they are
  installed, on 1 thread like the paths above: their tokenizer's own thread pool off
  (``TOKENIZERS_PARALLELISM=false``, ``RAYON_NUM_THREADS=1``) and model2vec's multiprocessing
  off (``use_multiprocessing=False``; it is on by default from 10,000 sentences);
* ``default_all_cores``: ``load_model(path, workers=N)`` (N processes, each on 1 thread:
  :mod:`psp_core.inference.fast.multiprocess_embed`), N the cores this process may use;
* ``threads_all_cores``: ``load_model(path, num_threads=N)`` with torch's threads set to N
  (one process, N threads), for comparison;
* ``model2vec_all_cores``: model2vec as it runs by default (its multiprocessing and its
  tokenizer's threads).

Also, in its own fresh process per round, the repeated-STS figure of earlier benchmarks: the
20,216 shared STS sentences embedded again and again with the defaults (``sts_repeated``: the
median of 7 passes after a first).

Prints one JSON object on stdout (per path: each round's sentences/s, median, and the goals
it is held to); logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common

log = _common.log

LANGS = ("ar", "de", "es", "fr", "ru", "tr", "zh")
PATHS = ("default", "word_sums_off", "cache_off", "model2vec", "sentence_transformers")
GOAL_FIRST_PASS = 60_000
GOAL_VS_MODEL2VEC = 5.0
GOAL_ALL_CORES = 1.7
BATCH_SIZE = 256
#: --quick: the corpus of the first pairs of each language
QUICK_CORPUS_PAIRS = 300


def build_corpus(data_dir: Path, results_dir: Path, limit: int | None = None) -> Path:
    """The distinct corpus (see the module docstring), from the first ``limit`` pairs of each
    language when given; made once per results directory."""
    tag = f"-first{limit}" if limit else ""
    path = results_dir / f"corpus-distinct-en-de{tag}.txt"
    if path.is_file():
        return path
    seen: set[str] = set()
    sentences: list[str] = []

    def take(lines: list[str]) -> None:
        for line in lines:
            key = line.lower()
            if line.strip() and key not in seen:
                seen.add(key)
                sentences.append(line)

    for lang in LANGS:
        english, other = _common.read_bitext(data_dir, lang, limit)
        take(english)
        if lang == "de":
            take(other)
    random.Random(26).shuffle(sentences)
    results_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(s.replace("\n", " ") + "\n" for s in sentences), encoding="utf-8")
    os.replace(tmp, path)
    return path


def build_bundle(
    data_dir: Path, results_dir: Path, vocab_size: int, dim: int, max_pairs: int | None = None
) -> Path:
    """A bundle of a sentencepiece model of ``vocab_size`` pieces (on the first ``max_pairs``
    en-de pairs when given) and a random table of ``dim``; made once per results directory."""
    import hashlib

    import numpy as np
    import sentencepiece as spm

    from psp_core.models.bundle import BundleConfig, is_bundle_directory, save_bundle

    tag = f"-first{max_pairs}" if max_pairs else ""
    path = results_dir / f"bundle-en-de-v{vocab_size}-d{dim}{tag}"
    if is_bundle_directory(path):
        return path
    spm_path, _ = _common.spm_model(
        data_dir, results_dir, vocab_size=vocab_size, max_pairs=max_pairs
    )
    proto = spm_path.read_bytes()
    size = spm.SentencePieceProcessor(model_proto=proto).GetPieceSize()
    table = np.random.default_rng(0).standard_normal((size, dim), dtype=np.float32)
    config = BundleConfig(
        dim=dim, vocab_size=size, spm_sha256=hashlib.sha256(proto).hexdigest(), languages=["de"]
    )
    return save_bundle(path, table, proto, config)


def exports(bundle: Path, results_dir: Path, paths: list[str]) -> dict[str, Path]:
    """The bundle exported for each peer library among ``paths`` that is installed."""
    from psp_core.models.export import export_model, is_export_directory

    made = {}
    for path, format, module in [
        ("model2vec", "model2vec", "model2vec"),
        ("sentence_transformers", "sentence-transformers", "sentence_transformers"),
    ]:
        if path not in paths:
            continue
        try:
            __import__(module)
        except ImportError:
            log.warning("%s is not installed: its path is skipped", module)
            continue
        target = results_dir / f"export-{bundle.name}-{format}"
        if not is_export_directory(target):
            export_model(bundle, format, target, overwrite=True)
        made[path] = target
    return made


def bundle_for(args: argparse.Namespace, vocab_size: int, dim: int) -> Path:
    """The bundle measured: ``--model`` when given, else the one built here with ``vocab_size``
    pieces and ``dim``, or its quick version (the quick sentencepiece model, dim 64)."""
    if getattr(args, "model", None):
        return Path(args.model)
    if args.quick:
        vocab_size, dim = _common.QUICK_VOCAB_SIZE, 64
    max_pairs = _common.QUICK_PAIRS if args.quick else None
    return build_bundle(args.data_dir, args.results_dir, vocab_size, dim, max_pairs)


def corpus_and_bundle(args: argparse.Namespace, vocab_size: int, dim: int) -> tuple[Path, Path]:
    """The corpus (its quick version with ``--quick``) and :func:`bundle_for`."""
    limit = QUICK_CORPUS_PAIRS if args.quick else None
    return build_corpus(args.data_dir, args.results_dir, limit), bundle_for(args, vocab_size, dim)


# --- one fresh process per measurement ------------------------------------------------------------


def worker(args: argparse.Namespace) -> dict:
    """Load, read, then time passes over the corpus; returns {pass: seconds}."""
    from psp_core.inference.fast.pooling import set_threads

    threads = args.threads
    set_threads(threads)  # (torch's threads where torch is installed: see light_install.py)
    sentences = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    if args.path in ("model2vec", "sentence_transformers"):
        embed = load_peer(args.path, args.model, all_cores=args.workers > 1)
    else:
        from psp_core import load_model

        options = {"word_sums_off": {"word_vector_bytes": 0}, "cache_off": {"word_cache_size": 0}}
        model = load_model(
            args.model, num_threads=threads, workers=args.workers, **options.get(args.path, {})
        )

        def embed(texts):
            return model.embed(texts, batch_size=BATCH_SIZE)

    seconds, cpu_seconds = [], []
    for _ in range(args.passes):
        vectors = None  # (the previous pass's 1 GB is freed first, as a user's would be)
        started, cpu_started = time.perf_counter(), time.process_time()
        vectors = embed(sentences)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)  # (this process's CPU only)
        assert len(vectors) == len(sentences)
    return {"sentences": len(sentences), "seconds": seconds, "cpu_seconds": cpu_seconds}


def load_peer(name: str, folder: str, all_cores: bool):
    if not all_cores:  # (read by the tokenizers library when its thread pool starts)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        os.environ["RAYON_NUM_THREADS"] = "1"
    if name == "model2vec":
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(folder)
        return lambda texts: model.encode(
            texts, batch_size=BATCH_SIZE, use_multiprocessing=all_cores
        )
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu", local_files_only=True)
    return lambda texts: model.encode(texts, batch_size=BATCH_SIZE)


def sts_worker(args: argparse.Namespace) -> dict:
    from psp_core import load_model
    from psp_core.inference.fast.pooling import set_threads

    set_threads(1)
    sentences, _ = _common.read_sts_sentences(args.data_dir)
    sentences = sentences[: args.sentences or None]
    model = load_model(args.model)
    seconds = []
    for _ in range(1 + args.sts_repeats):
        started = time.perf_counter()
        model.embed(sentences, batch_size=BATCH_SIZE)
        seconds.append(time.perf_counter() - started)
    return {"sentences": len(sentences), "seconds": seconds[1:]}


def run_worker(argv: list[str]) -> dict:
    completed = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise SystemExit(f"worker {argv} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--model", help="a model bundle (default: one built here, see above)")
    parser.add_argument("--vocab-size", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, see above")
    parser.add_argument("--sts-repeats", type=int, default=7)
    parser.add_argument("--no-all-cores", action="store_true")
    parser.add_argument(
        "--sentences", type=int, default=0, help="at most this many of the STS sentences; 0: all"
    )
    _common.add_quick_argument(
        parser,
        "300 pairs of each language, the quick sentencepiece model, dim 64, one round of the "
        "default and model2vec paths, 1,000 STS sentences twice",
    )
    parser.add_argument("--worker", choices=[*PATHS, "sts"], dest="path", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.path:
        _common.emit(sts_worker(args) if args.path == "sts" else worker(args))
        return
    if args.quick:
        args.rounds, args.paths, args.no_all_cores = 1, "default,model2vec", True
        args.sentences, args.sts_repeats = 1000, 1
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    corpus, bundle = corpus_and_bundle(args, args.vocab_size, args.dim)
    peers = exports(bundle, args.results_dir, args.paths.split(","))
    cores = len(os.sched_getaffinity(0))
    plan: list[tuple[str, list[str]]] = []
    for path in args.paths.split(","):
        if path in peers:  # (one pass: they keep nothing from one pass to the next)
            plan.append((path, ["--worker", path, "--model", str(peers[path]), "--passes", "1"]))
        elif path in ("default", "word_sums_off", "cache_off"):
            plan.append((path, ["--worker", path, "--model", str(bundle)]))
    if not args.no_all_cores and cores > 1:
        argv_all = ["--worker", "default", "--model", str(bundle), "--workers", str(cores)]
        plan.append(("default_all_cores", argv_all))
        argv_threads = ["--worker", "default", "--model", str(bundle), "--threads", str(cores)]
        plan.append(("threads_all_cores", argv_threads))
        if "model2vec" in peers:
            argv_peer = ["--worker", "model2vec", "--model", str(peers["model2vec"])]
            plan.append(
                ("model2vec_all_cores", [*argv_peer, "--passes", "1", "--workers", str(cores)])
            )
    plan.append(("sts_repeated", ["--worker", "sts", "--model", str(bundle)]))
    machine = _common.machine_info()
    rounds: dict[str, list[dict]] = {name: [] for name, _ in plan}
    for round_index in range(args.rounds):
        order = plan[round_index % len(plan) :] + plan[: round_index % len(plan)]
        for name, worker_argv in order:
            extra = ["--sts-repeats", str(args.sts_repeats), "--data-dir", str(args.data_dir)]
            extra += ["--sentences", str(args.sentences)]
            extra += ["--corpus", str(corpus)]
            result = run_worker([*worker_argv, *extra])
            rounds[name].append(result)
            rates = [round(result["sentences"] / s) for s in result["seconds"]]
            log.info("round %d %s: %s sentences/s", round_index + 1, name, rates)
    summary = summarize(rounds, cores)
    _common.emit(
        {
            "benchmark": "embed_corpus",
            "workload": "distinct sentences of the shared bitext (en sides + de), one pass each "
            "in a fresh process, tokenization included, batch_size 256",
            "corpus": {"path": str(corpus), "sentences": rounds[plan[0][0]][0]["sentences"]},
            "model": str(bundle),
            "machine": machine,
            "loadavg_at_end": _common.loadavg(),
            "paths": summary,
            "goals": goals(summary),
        }
    )


def summarize(rounds: dict[str, list[dict]], cores: int) -> dict:
    summary = {}
    for name, results in rounds.items():
        count = results[0]["sentences"]
        if name == "sts_repeated":
            per_round = [count / statistics.median(r["seconds"]) for r in results]
            summary[name] = {"per_round": [round(x) for x in per_round]}
        else:
            first = [count / r["seconds"][0] for r in results]
            second = [count / r["seconds"][1] for r in results if len(r["seconds"]) > 1]
            summary[name] = {
                "first_pass_per_round": [round(x) for x in first],
                "second_pass_per_round": [round(x) for x in second],
                "second_pass_median": round(statistics.median(second)) if second else None,
            }
            per_round = first
        summary[name]["median"] = round(statistics.median(per_round))
        if name == "default_all_cores":
            summary[name]["cores"] = cores
    return summary


def goals(summary: dict) -> dict:
    default = summary.get("default", {}).get("median")
    result = {}
    if default:
        result["first_pass_at_least_60000"] = default >= GOAL_FIRST_PASS
        if "cache_off" in summary:
            result["not_below_cache_off"] = default >= summary["cache_off"]["median"]
        if "model2vec" in summary:
            ratio = default / summary["model2vec"]["median"]
            result["vs_model2vec"] = round(ratio, 2)
            result["at_least_5x_model2vec"] = ratio >= GOAL_VS_MODEL2VEC
        if "default_all_cores" in summary:
            ratio = summary["default_all_cores"]["median"] / default
            result["all_cores_vs_one"] = round(ratio, 2)
            result["all_cores_at_least_1.7x"] = ratio >= GOAL_ALL_CORES
        if "default_all_cores" in summary and "model2vec_all_cores" in summary:
            ratio = (
                summary["default_all_cores"]["median"] / summary["model2vec_all_cores"]["median"]
            )
            result["all_cores_vs_model2vec_all_cores"] = round(ratio, 2)
    return result


if __name__ == "__main__":
    main()
