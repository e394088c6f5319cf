"""``kill -9`` anywhere in the multilingual model's run, then run again: the same outputs,
nothing left behind (as tests/pipelines/test_kill_anywhere.py does for a language's run, with its
runs forked from a warm interpreter too)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
import yaml

from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.corpora import DE_EN_REGISTRY, paranmt_zip, publish_de
from tests.pipelines.dagster_cli import (
    ROOT,
    Runs,
    dagster_env,
    kill_in_each_stage,
    run_to_the_end,
    tail,
)
from tests.pipelines.test_kill_anywhere import _tree

STAGES = [
    "multi_pairs",
    "multi_sentencepiece_model",
    "multi_training_data",
    "multi_psp_model",
    "multi_evaluation",
]
REGISTRY = (
    DE_EN_REGISTRY
    + """[multi]
sampling_alpha = 0.3
"""
)


@pytest.mark.slow
def test_kill_9_in_every_stage_of_the_multilingual_model_then_a_rerun_finishes_identically(
    tmp_path: Path, warm_runs
) -> None:
    seed = int(os.environ.get("PSP_FAULT_SEED") or time.time_ns() % 2**32)
    rng = random.Random(seed)
    server = OpusServer().start()
    try:
        publish_de(server, build_moses_zip)
        server.add_file("/para-nmt-50m.zip", paranmt_zip(700))
        (tmp_path / "languages.toml").write_text(REGISTRY)
        config = tmp_path / "smoke.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "resources": {"profile": {"config": {"name": "smoke"}}},
                    "ops": {"multi_psp_model": {"config": {"epochs": 2}}},
                    "execution": {"config": {"in_process": {}}},
                }
            )
        )
        envs = {}
        logs = []
        with Runs(warm_runs) as runs:
            for name in ("ref", "f"):
                envs[name] = dagster_env(tmp_path, server, name) | {
                    "PSP_LANGUAGES": str(tmp_path / "languages.toml"),
                    "PSP_PARANMT_URL": f"{server.base_url}/para-nmt-50m.zip",
                }
                logs.append(tmp_path / f"prepare-{name}.log")
                prepared = runs.script(
                    str(ROOT / "scripts" / "prepare_multi.py"), [], envs[name], logs[-1]
                )
                assert prepared.wait(300) == 0, tail(logs[-1])
                assert "[2/2] en: ready" in logs[-1].read_text()
            logs.append(tmp_path / "reference.log")
            run = runs.execute("psp_multi_job", config, envs["ref"], logs[-1], partition=None)
            left_after_start = run_to_the_end(run, logs[-1], STAGES, 300)
            kills, killed_logs = kill_in_each_stage(
                runs, "psp_multi_job", STAGES, config=config, env=envs["f"],
                logs_dir=tmp_path, rng=rng, seed=seed, partition=None,
                left_after_start=left_after_start,
            )  # fmt: skip
            logs += killed_logs
            logs.append(tmp_path / "final.log")
            final = runs.execute("psp_multi_job", config, envs["f"], logs[-1], partition=None)
            assert final.wait(300) == 0, tail(logs[-1])
        reference = _tree(Path(envs["ref"]["PSP_STORAGE_ROOT"]) / "multi")
        faulty = _tree(Path(envs["f"]["PSP_STORAGE_ROOT"]) / "multi")
        assert sorted(faulty) == sorted(reference), f"killed at {kills}"
        assert [path for path in reference if reference[path] != faulty[path]] == [], kills
        assert any(path.endswith("embeddings.safetensors") for path in faulty)
    finally:
        server.stop()
