"""``kill -9`` anywhere in a language's run, then run again: the same outputs, nothing left.

One uninterrupted ``dagster job execute`` of the smoke profile gives the reference (and how long
its run went on after each step started). A second instance and storage root then sees its run
killed (the whole process group, ``SIGKILL``) at a random moment of every stage in turn (within
the first half of what the reference had left then), each time started again, and finally run
to the end, which must need no manual step: every data output byte-identical to the reference,
the same files and nothing else (no temporary file, no checkpoint, no partial download), every
killed run marked failed and no pool slot held. The runs are forked from a warm interpreter
(``warm_runs``): the same command, without its seconds of imports each time.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import LANGUAGE_STAGES
from tests.pipelines.corpora import publish_de
from tests.pipelines.dagster_cli import (
    Runs,
    dagster_env,
    kill_in_each_stage,
    run_to_the_end,
    tail,
    write_config,
)

STAGES = LANGUAGE_STAGES
#: Files whose content records when or how fast (timings, dates), not what was computed.
VOLATILE = {
    "manifest.json",
    "config.json",
    "results.json",
    "results.md",
    "README.md",
    "version.json",
    "promotions.jsonl",
}
#: Lock files of the training slot: flock targets that exist by design.
KEPT_BETWEEN_RUNS = {".locks"}
#: the creation time that starts a model version's name (the rest is its fingerprint)
VERSION_TIME = re.compile(r"\d{8}T\d{6}Z-")


def _tree(storage: Path) -> dict[str, bytes | str | None]:
    """Relative path -> bytes (None for volatile files; ``link -> target`` for a symbolic
    link, not followed) of everything under ``storage``; model versions are named without
    their creation time, which differs from run to run."""
    tree = {}
    for folder, directories, files in os.walk(storage):
        for name in [*files, *(d for d in directories if Path(folder, d).is_symlink())]:
            path = Path(folder, name)
            relative = path.relative_to(storage)
            if relative.parts[0] in KEPT_BETWEEN_RUNS:
                continue
            key = VERSION_TIME.sub("", str(relative))
            if path.is_symlink():
                tree[key] = "link -> " + VERSION_TIME.sub("", os.readlink(path))
            else:
                tree[key] = None if path.name in VOLATILE else path.read_bytes()
    return dict(sorted(tree.items()))


def _sts(storage: Path) -> dict:
    results = json.loads((storage / "de" / "model_evaluation" / "results.json").read_text())
    return results["sts"]


@pytest.mark.slow
def test_kill_9_at_random_points_of_every_stage_then_a_rerun_finishes_identically(
    tmp_path, monkeypatch, warm_runs
) -> None:
    # a new seed each run (PSP_FAULT_SEED repeats one), named in every failure message
    seed = int(os.environ.get("PSP_FAULT_SEED") or time.time_ns() % 2**32)
    rng = random.Random(seed)
    server = OpusServer().start()
    try:
        publish_de(server, build_moses_zip)
        config = write_config(tmp_path / "smoke.yaml", "smoke.yaml", epochs=2, in_process=True)
        reference, faulty = dagster_env(tmp_path, server, "ref"), dagster_env(tmp_path, server, "f")
        logs = []
        with Runs(warm_runs) as runs:
            logs.append(tmp_path / "reference.log")
            run = runs.execute("psp_language_job", config, reference, logs[-1])
            left_after_start = run_to_the_end(run, logs[-1], STAGES, 300)
            kills, killed_logs = kill_in_each_stage(
                runs, "psp_language_job", STAGES, config=config, env=faulty,
                logs_dir=tmp_path, rng=rng, seed=seed, left_after_start=left_after_start,
            )  # fmt: skip
            logs += killed_logs
            logs.append(tmp_path / "final.log")
            assert runs.execute("psp_language_job", config, faulty, logs[-1]).wait(300) == 0, tail(
                logs[-1]
            )

        ref_storage = Path(reference["PSP_STORAGE_ROOT"])
        faulty_storage = Path(faulty["PSP_STORAGE_ROOT"])
        ref_tree, faulty_tree = _tree(ref_storage), _tree(faulty_storage)
        assert sorted(faulty_tree) == sorted(ref_tree), f"killed at {kills}"
        different = [path for path in ref_tree if ref_tree[path] != faulty_tree[path]]
        assert different == [], f"killed at {kills}"
        assert _sts(faulty_storage) == _sts(ref_storage)

        monkeypatch.setenv("DAGSTER_HOME", faulty["DAGSTER_HOME"])
        instance = DagsterInstance.from_config(faulty["DAGSTER_HOME"])
        # every killed run ended: failed by the next run's dead-run sweep, or succeeded when
        # the kill came after it had finished (its process was still shutting down)
        statuses = [run.status for run in reversed(instance.get_runs())]  # oldest first
        assert len(statuses) == len(STAGES) + 1 and statuses[-1] == DagsterRunStatus.SUCCESS
        assert set(statuses) <= {DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS}, kills
        assert statuses.count(DagsterRunStatus.FAILURE) >= len(STAGES) - 2, kills
        storage = instance.event_log_storage
        assert storage.get_concurrency_info("psp_training").claimed_slots == []
        instance.dispose()
    finally:
        server.stop()
