"""End-to-end check of the Dagster code location, as CI runs it: real `dagster job execute`.

Starts a loopback OPUS API + zip server on 127.0.0.1 (``tests/ops/opus_server.py``) serving
generated en-de corpora and a ParaNMT zip, writes a tiny evaluation directory, then runs the full
language job with the smoke profile for each language given, **in parallel** (one
``dagster job execute`` process per language, sharing one ``DAGSTER_HOME`` with this repo's
``dagster.yaml``), and checks:

* each run succeeded, and the model bundle and evaluation results exist;
* ``psp embed`` works with each bundle (a float32 ``[n, dim]`` array);
* the trainings of the runs never overlapped: the ``psp_training`` pool (limit 1 in
  dagster.yaml) and the machine-wide training slot (``ComputeResource.max_concurrent_trainings``,
  a file lock that holds even when two SQLite-backed runs claim the pool at the same instant)
  serialise training while the data stages run side by side.

    python scripts/ci_dagster_e2e.py [--languages de en] [--keep DIR]

Exit status 0 when every check passes; otherwise the failing check is printed on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ops.opus_server import OpusServer, build_moses_zip  # noqa: E402
from tests.pipelines.corpora import paranmt_zip, publish_de, write_eval_dir  # noqa: E402

JOB = "psp_language_job"
INIT_INSTANCE = (
    "from dagster import DagsterInstance\n"
    "instance = DagsterInstance.get()\n"
    "instance.get_runs(limit=1)\n"
    "instance.event_log_storage.get_concurrency_keys()\n"
    "instance.dispose()\n"
)


class CheckFailed(RuntimeError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def run_config(work: Path, in_process: bool) -> Path:
    """The smoke profile; in-process saves each step's Python start-up (seconds per step)."""
    config = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    if in_process:
        config["execution"] = {"config": {"in_process": {}}}
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch(lang: str, config: Path, env: dict, logs: Path) -> subprocess.Popen:
    command = [
        str(Path(sys.executable).with_name("dagster")),
        "job",
        "execute",
        "-m",
        "pipelines.definitions",
        "-j",
        JOB,
        "--tags",
        json.dumps({"dagster/partition": lang}),
        "-c",
        str(config),
    ]
    print("$", " ".join(command), flush=True)
    log = open(logs / f"dagster-{lang}.log", "wb")  # noqa: SIM115 (closed by the caller)
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def training_windows(dagster_home: Path, env: dict) -> dict[str, tuple[float, float]]:
    """run tag partition -> (start, end) of its training, from the psp_model materializations
    (the window inside the step, after it got its training slot)."""
    code = """
import json
from dagster import AssetKey, DagsterInstance
instance = DagsterInstance.get()
windows = {}
for run in instance.get_runs():
    for event in instance.get_records_for_run(run.run_id).records:
        materialization = event.event_log_entry.asset_materialization
        if materialization and materialization.asset_key == AssetKey("psp_model"):
            metadata = materialization.metadata
            window = [metadata["training_started"].value, metadata["training_ended"].value]
            windows[run.tags["dagster/partition"]] = window
print(json.dumps(windows))
"""
    output = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return {lang: tuple(times) for lang, times in json.loads(output.splitlines()[-1]).items()}


def check_language(lang: str, storage: Path, work: Path, env: dict) -> None:
    bundle = storage / lang / "psp_model" / "model"
    check((bundle / "config.json").is_file(), f"{lang}: no model bundle at {bundle}")
    results = storage / lang / "model_evaluation" / "results.json"
    check(results.is_file(), f"{lang}: no evaluation results at {results}")
    sts_mean = json.loads(results.read_text())["sts"]["mean"]
    check(sts_mean is not None, f"{lang}: results.json has no STS mean")
    sentences = work / f"sentences-{lang}.txt"
    sentences.write_text("The old man reads a long letter.\nDer alte Mann liest einen Brief.\n\n")
    vectors = work / f"vectors-{lang}.npy"
    command = [str(Path(sys.executable).with_name("psp")), "embed", "--sentence-file"]
    command += [str(sentences), "--model", str(bundle), "--output-file", str(vectors)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, env=env, check=True)
    array = np.load(vectors)
    dim = json.loads((bundle / "config.json").read_text())["dim"]
    check(array.shape == (3, dim), f"{lang}: psp embed gave shape {array.shape}, not (3, {dim})")
    check(array.dtype == np.float32 and np.isfinite(array).all(), f"{lang}: bad vectors")
    check(not array[2].any(), f"{lang}: the empty sentence should embed to zeros")
    print(f"{lang}: bundle, evaluation (STS mean {sts_mean['pearson']:.1f}), psp embed OK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", nargs="+", default=["de", "en"])
    parser.add_argument(
        "--multiprocess",
        action="store_true",
        help="run each step in its own process (the default executor) instead of in-process",
    )
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: a temp dir)")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="psp-dagster-e2e-"))
    if work.exists() and args.keep:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    dagster_home, storage, eval_dir = work / "dagster_home", work / "storage", work / "eval"
    dagster_home.mkdir()
    shutil.copy(ROOT / "configs" / "dagster.yaml", dagster_home / "dagster.yaml")
    write_eval_dir(eval_dir)

    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    server = OpusServer().start()
    try:
        publish_de(server, build_moses_zip)
        paranmt = server.add_file("/para-nmt-50m.zip", paranmt_zip(700))
        env = os.environ | {
            "DAGSTER_HOME": str(dagster_home),
            "PSP_STORAGE_ROOT": str(storage),
            "PSP_OPUS_API": server.api_url,
            "PSP_PARANMT_URL": paranmt,
            "PSP_EVAL_DIR": str(eval_dir),
            "PSP_DEVICE": "cpu",
            "PYTHONPATH": str(ROOT),
        }
        config = run_config(work, in_process=not args.multiprocess)
        # create the SQLite storages once, before parallel runs race to create their tables
        subprocess.run([sys.executable, "-c", INIT_INSTANCE], env=env, cwd=ROOT, check=True)
        started = time.perf_counter()
        processes = {lang: launch(lang, config, env, work) for lang in args.languages}
        failed = [lang for lang, process in processes.items() if process.wait() != 0]
        elapsed = time.perf_counter() - started
        for lang in failed:
            sys.stderr.write((work / f"dagster-{lang}.log").read_text(errors="replace")[-6000:])
        check(not failed, f"dagster job execute failed for {failed} (logs in {work})")
        print(f"{len(processes)} runs in parallel finished in {elapsed:.1f}s", flush=True)
        for lang in args.languages:
            check_language(lang, storage, work, env)
        windows = training_windows(dagster_home, env)
        spans = sorted(windows.values())
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            check(end <= start, f"training steps overlapped despite the pool limit: {windows}")
        print(f"training steps ran one at a time: {windows}")
    except CheckFailed as err:
        print(f"FAILED: {err}", file=sys.stderr)
        return 1
    finally:
        server.stop()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("dagster end-to-end: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
