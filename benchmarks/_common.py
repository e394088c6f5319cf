"""Shared helpers for the benchmark scripts (data location, machine info, the 50k
sentencepiece model, timing summaries). Not part of psp_core.

The scripts are run as ``python benchmarks/<name>.py``, so this directory is on ``sys.path``
and ``import _common`` works without installing anything.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

log = logging.getLogger("benchmarks")


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )


def add_model_arguments(parser, *, batch_size: int) -> None:
    """The data, cache and model-size flags every benchmark takes."""
    add_data_arguments(parser)
    parser.add_argument("--vocab-size", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=batch_size)


def add_data_arguments(parser) -> None:
    """``--data-dir`` (the shared data) and ``--results-dir`` (caches and work files)."""
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=DEFAULT_RESULTS_DIR,
        help="caches and work files (default benchmarks/results/, gitignored)",
    )


def add_quick_argument(parser, what: str) -> None:
    """``--quick``: the script's code path on tiny settings (``what``), a smoke run whose
    figures mean nothing; tests/test_benchmarks.py runs every script this way."""
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {what}")


def emit(result: dict) -> None:
    """Print the one JSON object the scripts promise on stdout."""
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def require_data(data_dir: Path, *parts: str) -> Path | None:
    """Return ``data_dir/parts`` or, when it is absent, print ``{"skipped": ...}`` and return None."""
    path = data_dir.joinpath(*parts)
    if not path.exists():
        message = (
            f"real data not found at {path} (expected ../shared/data beside the repository, "
            "or pass --data-dir); skipping"
        )
        log.warning(message)
        emit({"skipped": message})
        return None
    return path


def dev_suite_for(root: Path, code: str, eval_dir: Path = DEFAULT_DATA_DIR / "eval"):
    """The dev suite (psp_core/evaluation/dev_suite.py) of ``code``'s model, ``multi`` for the
    multilingual model's languages, on the dev sets under ``eval_dir`` and the held-back pairs
    the pipeline prepared under the storage root ``root``, and ``code``'s spec in the
    shared-data registry (its pretokenizer: the training file was encoded with it, so a model
    trained on it must tokenize the same)."""
    from assets.settings.languages import load_registry
    from psp_core.evaluation.dev_suite import DevSuite

    registry = load_registry(REPO_ROOT / "configs" / "languages-shared-data.toml")
    languages = registry.multi_languages() if code == "multi" else [code]
    held_back = {
        lang: root / lang / "deduplicated_pairs" / "dev_pairs.parquet" for lang in languages
    }
    pools = {lang: root / lang / "deduplicated_pairs" / "dev_pool.parquet" for lang in languages}
    pools = {lang: path for lang, path in pools.items() if path.is_file()}
    spec = registry.multi if code == "multi" else registry[code]
    return DevSuite(eval_dir, held_back, pools), spec


def machine_info() -> dict:
    import numpy
    import sentencepiece
    import torch

    from psp_core.training.negative_mining import fast_bfloat16_available

    # the first processor's fields: the name alone ("AMD EPYC") does not tell a VM's hosts
    # apart (a Zen 3 host has no AVX-512 and no fast bfloat16, a Zen 4 host has both)
    cpu: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                cpu[key.strip()] = value.strip()
    except OSError:
        pass
    cpu_model = cpu.get("model name", "unknown")
    flags = set(cpu.get("flags", "").split())
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        nproc = os.cpu_count()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - informative only
        capability = None
    return {
        "cpu_model": cpu_model,
        "nproc": nproc,
        "cpu_capability": capability,
        "cpu_family_model": f"{cpu.get('cpu family', '?')}/{cpu.get('model', '?')}",
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        # whether mining screens with bfloat16 products here (psp_core.training.negative_mining)
        "fast_bfloat16": fast_bfloat16_available(torch.device("cpu")),
        "torch": torch.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "numpy": numpy.__version__,
        "sentencepiece": sentencepiece.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": loadavg(),
    }


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def summarize_times(times: list[float], items: int, cpu_times: list[float] | None = None) -> dict:
    """Best and median throughput (items/s) of repeated timings of the same work.

    ``cpu_times`` (process CPU seconds of each repeat) gives ``cpu_per_wall``: about the number
    of busy threads; far below the thread count means the process was waiting (other load).
    """
    best = min(times)
    median = statistics.median(times)
    extra = {}
    if cpu_times:
        extra["cpu_per_wall_median"] = round(
            statistics.median(c / t for c, t in zip(cpu_times, times, strict=True) if t > 0), 2
        )
    return {
        "items": items,
        "repeats": len(times),
        "best_per_s": round(items / best, 1),
        "median_per_s": round(items / median, 1),
        "best_s": round(best, 6),
        "median_s": round(median, 6),
        "times_s": [round(t, 6) for t in times],
        **extra,
    }


# --------------------------------------------------------------------------------------------
# data


def read_lines_gz(path: Path, limit: int | None = None) -> list[str]:
    lines = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            if limit is not None and index >= limit:
                break
            lines.append(line.rstrip("\n"))
    return lines


def read_bitext(data_dir: Path, lang: str = "de", limit: int | None = None) -> tuple[list, list]:
    folder = data_dir / "bitext" / f"en-{lang}"
    english = read_lines_gz(folder / "combined.en.gz", limit)
    other = read_lines_gz(folder / f"combined.{lang}.gz", limit)
    if len(english) != len(other):
        raise SystemExit(f"{folder}: {len(english)} English lines but {len(other)} {lang} lines")
    return english, other


def read_sts_sentences(data_dir: Path) -> tuple[list[str], list[str]]:
    """Both sides of every ``eval/sts/*/*.tsv`` and ``eval/sts17/*.tsv`` (not deduplicated)."""
    files = sorted((data_dir / "eval" / "sts").glob("*/*.tsv")) + sorted(
        (data_dir / "eval" / "sts17").glob("*.tsv")
    )
    sentences: list[str] = []
    for path in files:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                fields = line.rstrip("\n").split("\t")
                if len(fields) != 3:
                    raise SystemExit(f"{path}:{number}: expected 3 tab-separated fields")
                sentences.extend(fields[1:])
    return sentences, [str(p.relative_to(data_dir)) for p in files]


# --------------------------------------------------------------------------------------------
# the sentencepiece model


def spm_model(
    data_dir: Path,
    results_dir: Path,
    *,
    vocab_size: int = 50_000,
    lang: str = "de",
    max_pairs: int | None = None,
    character_coverage: float = 0.995,
    pretokenizer: str = "none",
) -> tuple[Path, dict]:
    """Train (or reuse the cached) unigram model on the lowercased en-XX bitext (the XX side
    segmented by ``pretokenizer`` first, as ``psp_core.Tokenizer`` does for Chinese).

    Returns the model path and a description (cache hit, training seconds, actual vocab size).
    """
    import sentencepiece as spm

    tag = f"spm-en-{lang}-unigram-v{vocab_size}-cc{character_coverage}"
    if max_pairs is not None:
        tag += f"-first{max_pairs}"
    if pretokenizer != "none":
        tag += f"-{pretokenizer}"
    path = results_dir / f"{tag}.model"
    info: dict = {"path": str(path), "requested_vocab_size": vocab_size, "lang": lang}
    if path.is_file():
        info["cached"] = True
    else:
        from psp_core.tokenization.tokenizer import make_pretokenizer

        english, other = read_bitext(data_dir, lang, max_pairs)
        segment = make_pretokenizer(pretokenizer) or (lambda text: text)

        def sentences() -> Iterator[str]:
            for line in english:
                yield line.lower()
            for line in other:
                yield segment(line.lower())

        log.info(
            "training sentencepiece unigram model, vocab %d, on %d lowercased sentences "
            "(cached afterwards at %s)",
            vocab_size,
            len(english) + len(other),
            path,
        )
        writer = io.BytesIO()
        started = time.perf_counter()
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=writer,
            model_type="unigram",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=character_coverage,
            num_threads=os.cpu_count() or 1,
            minloglevel=1,
        )
        info["train_seconds"] = round(time.perf_counter() - started, 1)
        info["train_sentences"] = len(english) + len(other)
        info["cached"] = False
        results_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        tmp.write_bytes(writer.getvalue())
        os.replace(tmp, path)
        log.info("sentencepiece model trained in %.1f s", info["train_seconds"])
    proto = path.read_bytes()
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(proto)
    info["vocab_size"] = processor.GetPieceSize()
    info["sha256"] = hashlib.sha256(proto).hexdigest()
    return path, info


# --------------------------------------------------------------------------------------------
# --quick: tiny settings shared by the scripts

#: the sentencepiece model of a quick run: QUICK_VOCAB_SIZE pieces (``hard_vocab_limit`` off:
#: fewer when the text has fewer) on the first QUICK_PAIRS pairs of the bitext
QUICK_VOCAB_SIZE = 1000
QUICK_PAIRS = 1000
QUICK_DIM = 32
#: training settings of a quick model (the smoke profile's, assets/settings/profiles.py)
QUICK_TRAINING = {
    "dim": QUICK_DIM,
    "epochs": 1,
    "batch_size": 32,
    "max_megabatch": 4,
    "anneal_every": 0,
    "lr": 0.01,
    "log_every": 0,
    "checkpoint_every": 0,
}


def quick_spm_model(data_dir: Path, results_dir: Path, lang: str = "de") -> tuple[Path, dict]:
    """:func:`spm_model` at the quick settings."""
    return spm_model(
        data_dir, results_dir, vocab_size=QUICK_VOCAB_SIZE, lang=lang, max_pairs=QUICK_PAIRS
    )


def quick_eval_dir(data_dir: Path, results_dir: Path, lines: int = 100) -> Path:
    """A copy of ``data_dir/eval`` with the first ``lines`` lines of every file (STS pairs,
    Tatoeba's line-aligned sides stay aligned): the evaluations of a quick run read it. Made
    once per results directory."""
    target = results_dir / f"quick-eval-{lines}"
    if target.is_dir():
        return target
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    source = data_dir / "eval"
    for path in sorted(source.rglob("*")):
        if path.is_file():
            copy = tmp / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            with open(path, encoding="utf-8") as handle:
                head = [line for _, line in zip(range(lines), handle, strict=False)]
            copy.write_text("".join(head), encoding="utf-8")
    os.replace(tmp, target)
    return target


def eval_dir_for(args) -> Path:
    """The evaluation sets a script scores on: ``--data-dir``'s, or their first lines
    (:func:`quick_eval_dir`) with ``--quick``."""
    if args.quick:
        return quick_eval_dir(args.data_dir, args.results_dir)
    return args.data_dir / "eval"


#: the offline registry: the pipeline on the real data, its folders named relative to the repository
OFFLINE_REGISTRY = REPO_ROOT / "configs" / "languages-shared-data.toml"


def offline_registry_text(
    data_dir: Path, bitext: dict[str, Path] | None = None, source: Path = OFFLINE_REGISTRY
) -> str:
    """The text of the registry ``source`` with its data folders under ``data_dir`` (absolute),
    and each language of ``bitext`` reading the folder given instead of its shared bitext."""
    data_dir = Path(data_dir).resolve()
    named = os.path.relpath(DEFAULT_DATA_DIR, REPO_ROOT)  # how the offline registry names it
    text = source.read_text(encoding="utf-8").replace(f'"{named}/', f'"{data_dir}/')
    for lang, folder in (bitext or {}).items():
        shared = f'"{data_dir}/bitext/en-{lang}"'
        if shared not in text:
            raise SystemExit(f"{source} has no {shared} to replace")
        text = text.replace(shared, f'"{folder}"')
    return text


def quick_registry(
    data_dir: Path, results_dir: Path, langs: tuple[str, ...], pairs: int = QUICK_PAIRS
) -> Path:
    """The offline registry reading, for each of ``langs``, a copy of the first ``pairs`` pairs
    of its shared bitext, made under ``results_dir``: the pipeline's stages on a slice of the
    real data. The other languages read the shared data."""
    folder = results_dir / f"quick-bitext-{pairs}"
    copies = {}
    for lang in langs:
        english, other = read_bitext(data_dir, lang, pairs)
        target = copies[lang] = folder / f"en-{lang}"
        target.mkdir(parents=True, exist_ok=True)
        for code, lines in (("en", english), (lang, other)):
            with gzip.open(target / f"combined.{code}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in lines))
    path = folder / "languages.toml"
    path.write_text(offline_registry_text(data_dir, copies), encoding="utf-8")
    return path


def quick_root(data_dir: Path, results_dir: Path, lang: str = "de") -> Path:
    """A storage root laid out as the pipeline's for ``lang`` (what the scripts that read a
    ``make run`` output need), built from the first pairs of the bitext: the quick
    sentencepiece model, ``training_data/train.h5`` (QUICK_PAIRS pairs), a model trained on it
    for one epoch at QUICK_TRAINING (``psp_model/model``) and the next 200 pairs as held-back
    dev pairs (``deduplicated_pairs/dev_pairs.parquet``). Made once per results directory."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ops.training_data.packing import pack_pairs
    from psp_core import Tokenizer, TrainConfig, train

    root = results_dir / f"quick-root-{lang}"
    folder = root / lang
    model_dir = folder / "psp_model" / "model"
    if model_dir.is_dir():
        return root
    spm_path, _ = quick_spm_model(data_dir, results_dir, lang)
    english, other = read_bitext(data_dir, lang, QUICK_PAIRS + 200)
    pairs = [p for p in zip(english, other, strict=True) if p[0].strip() and p[1].strip()]
    spm_copy = folder / "sentencepiece_model" / "sentencepiece.model"
    data = folder / "training_data" / "train.h5"
    held_back = folder / "deduplicated_pairs" / "dev_pairs.parquet"
    for path in (spm_copy, data, held_back):
        path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(spm_path, spm_copy)
    pack_pairs(pairs[:QUICK_PAIRS], Tokenizer.from_file(spm_copy), data, lang=lang)
    dev = pairs[QUICK_PAIRS:]
    pq.write_table(pa.table({"src": [p[0] for p in dev], "tgt": [p[1] for p in dev]}), held_back)
    work = folder / "psp_model" / f"tmp-{os.getpid()}"
    train(data, spm_copy, work, TrainConfig(**QUICK_TRAINING), resume=False)
    os.replace(work, model_dir)
    return root


def status_kb(field: str) -> int | None:
    """A ``/proc/self/status`` field in kB (``VmRSS``, ``VmHWM``...); None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------------------------
# memory and CPU of a process tree over time


def _proc_fields(pid: int | str) -> list[str] | None:
    """``/proc/<pid>/stat`` fields after the command name (index 0 is the state)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (``/proc/<pid>/task/<tid>/children``, recursively)."""
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", encoding="ascii") as handle:
                    children = [int(c) for c in handle.read().split()]
            except OSError:
                continue
            found.extend(children)
            stack.extend(children)
    return found


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class ProcessSampler:
    """Samples this process and its live descendants (worker processes) every ``interval``
    seconds on a thread of its own (Linux ``/proc``; samples nothing elsewhere).

    Each sample is ``(time.time(), own RSS kB, tree PSS kB, CPU seconds)``: the tree's
    proportional set size counts pages shared by forked workers once; CPU seconds are this
    process's, its reaped children's and its live descendants' user + system time.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-sampler", daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def sample(self) -> tuple[float, int, int, float] | None:
        pid = os.getpid()
        own = _proc_fields(pid)
        if own is None:
            return None
        # utime, stime, cutime, cstime are fields 14-17 of stat, 11-14 after the command name
        ticks = sum(int(own[i]) for i in range(11, 15))
        pss = _pss_kb(pid)
        for child in _descendants(pid):
            fields = _proc_fields(child)
            if fields is not None:
                ticks += int(fields[11]) + int(fields[12])
                pss += _pss_kb(child)
        rss = status_kb("VmRSS") or 0
        return time.time(), rss, pss, ticks / self._tick

    def _loop(self) -> None:
        while True:
            if (sample := self.sample()) is not None:
                self.samples.append(sample)
            if self._stop.wait(self.interval):
                return

    def start(self) -> ProcessSampler:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, int, int, float]]:
        self._stop.set()
        self._thread.join()
        if (sample := self.sample()) is not None:
            self.samples.append(sample)
        return self.samples

    def _cpu(self) -> list[float]:
        """The samples' CPU seconds, cleaned of the two races of reading a parent and then its
        children: a child reaped in between (counted nowhere: a dip) or reaped while its times
        were already in the parent's (counted twice: a spike). Each value is the smaller of it
        and the next one (no one-sample spike), then the running maximum (no dip)."""
        raw = [s[3] for s in self.samples]
        cleaned = [min(value, following) for value, following in zip(raw, raw[1:], strict=False)]
        cleaned += raw[-1:]
        for i in range(1, len(cleaned)):
            cleaned[i] = max(cleaned[i], cleaned[i - 1])
        return cleaned

    def window(self, start: float, end: float) -> dict:
        """Peak own RSS and tree PSS (MiB) of the samples in ``[start, end]``, and the CPU
        seconds between the last sample before ``start`` and the first one after ``end``."""
        if not self.samples:
            return {}
        times = [s[0] for s in self.samples]
        inside = [s for s in self.samples if start <= s[0] <= end]
        before = max([i for i, t in enumerate(times) if t <= start], default=0)
        after = min([i for i, t in enumerate(times) if t >= end], default=len(times) - 1)
        cpu = self._cpu()
        return {
            "peak_rss_mib": round(max((s[1] for s in inside), default=0) / 1024),
            "peak_tree_pss_mib": round(max((s[2] for s in inside), default=0) / 1024),
            "cpu_s": round(cpu[after] - cpu[before], 2),
        }

    def timeline(self, origin: float, every: float = 2.0) -> list[list[float]]:
        """``[seconds since origin, own RSS MiB, tree PSS MiB]`` about every ``every`` s, each
        point the largest of the samples in its interval (so no peak is left out)."""
        points: dict[int, list[float]] = {}
        for t, rss, pss, _ in self.samples:
            slot = int((t - origin) // every)
            point = points.setdefault(slot, [round(slot * every, 1), 0, 0])
            point[1] = max(point[1], round(rss / 1024))
            point[2] = max(point[2], round(pss / 1024))
        return [points[slot] for slot in sorted(points)]
