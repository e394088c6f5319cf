"""psp_model's Dagster event log after an interrupted training: psp_core's "resuming from" and
progress lines are there, and a checkpoint that no longer fits the training file is not resumed.

The upstream stages are the toy sentencepiece model and training file of tests/conftest.py,
committed as the stages' outputs; the first training runs in a process killed with SIGKILL.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from assets.framework.stage import Stage, fingerprint
from assets.settings.profiles import ProfileResource
from assets.settings.resources import ComputeResource, EvaluationDataResource, StorageResource
from pipelines.definitions import defs
from tests.assets.kills import kill_at_first_checkpoint
from tests.conftest import write_training_file

ROOT = Path(__file__).resolve().parents[2]
TRAINING = dict(dim=32, epochs=2, batch_size=32, max_megabatch=4, anneal_every=0, lr=0.01)
REGISTRY = """[languages.de]
source = "local"
local_dir = "unused"

[languages.de.training]
checkpoint_every = 5
log_every = 10
"""


def materialize_model(root: str, *, force: bool = False, instance: DagsterInstance | None = None):
    """psp_model for de with the toy settings (also the killed process's whole work)."""
    config = {"ops": {"psp_model": {"config": {**TRAINING, "dev_sts": None, "force": force}}}}
    return materialize(
        [defs.get_assets_def("psp_model")],
        partition_key="de",
        resources={
            "storage": StorageResource(root=root),
            "compute": ComputeResource(device="cpu", threads=1, workers=1),
            "eval_data": EvaluationDataResource(eval_dir=str(Path(root) / "eval")),
            "profile": ProfileResource(),
        },
        run_config=config,
        instance=instance,
    )


def logs(instance: DagsterInstance, result) -> list[tuple[int, str]]:
    """(level, message) of the run's log lines (``context.log``), in order."""
    return [
        (entry.level, entry.user_message)
        for entry in instance.all_logs(result.run_id)
        if entry.dagster_event is None
    ]


@pytest.fixture()
def storage(tmp_path, monkeypatch, spm_path, toy_training_file) -> Path:
    """A storage root where de's sentencepiece model and training data are materialized."""
    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    root = tmp_path / "storage"
    resource = StorageResource(root=str(root))
    for name, output, source in (
        ("sentencepiece_model", "model", spm_path),
        ("training_data", "data", toy_training_file),
    ):
        stage = Stage(resource, "de", name)
        shutil.copy(source, stage.path(source.name))
        stage.commit(fingerprint(stage=name), {output: source.name}, {})
    return root


def kill_after_first_checkpoint(root: Path) -> Path:
    """Materialize psp_model in another process, SIGKILL it once it has saved a checkpoint;
    returns the checkpoint directory."""
    code = (
        "import sys; from tests.assets.test_model_log import materialize_model as m; m(sys.argv[1])"
    )
    model_dir = root / "de" / "psp_model"
    kill_at_first_checkpoint(code, [str(root)], model_dir, 180)
    [checkpoint] = [path.parent for path in model_dir.glob("checkpoint-*/LATEST")]
    return checkpoint


@pytest.mark.slow
def test_resumed_training_logs_to_dagster_and_a_foreign_checkpoint_starts_over(
    storage, tmp_path, toy, tokenizer
):
    checkpoint = kill_after_first_checkpoint(storage)
    saved = shutil.copytree(checkpoint, tmp_path / "checkpoint-copy")

    instance = DagsterInstance.ephemeral()
    resumed = materialize_model(str(storage), instance=instance)
    assert resumed.success
    lines = logs(instance, resumed)
    resuming = [(level, text) for level, text in lines if "resuming from" in text]
    assert len(resuming) == 1, lines
    level, text = resuming[0]
    assert level == logging.INFO and str(checkpoint) in text and "psp_core.training" in text
    # progress in the run's event log: epoch, step, mega-batch, loss, pairs/s and time left
    progress = r"epoch \d/2 step \d+/\d+ megabatch \d+ loss [\d.]+ pairs/s \d+ eta epoch \S+ run"
    assert any(re.search(progress, text) for _, text in lines), lines
    assert sum("end of epoch" in text for _, text in lines) >= 1, lines
    assert not checkpoint.exists()  # removed after success

    # the training file changes in place under the same manifest (the same pairs reversed):
    # the checkpoint of the old file is not resumed
    shutil.copytree(saved, checkpoint)
    data = next((storage / "de" / "training_data").glob("*.h5"))
    write_training_file(data, tokenizer, toy.pairs(2000)[::-1])
    again = materialize_model(str(storage), force=True, instance=instance)
    assert again.success
    lines = logs(instance, again)
    [warning] = [text for level, text in lines if level == logging.WARNING]
    assert "another training file" in warning and "starting the training over" in warning
    assert not any("resuming from" in text for _, text in lines)


@pytest.mark.slow
def test_a_checkpoint_none_of_whose_steps_reads_back_starts_over(storage):
    """The pipeline has no one to ask: a checkpoint that cannot be resumed at all (its only
    step's weights truncated) is a warning naming the file, and the training starts over."""
    checkpoint = kill_after_first_checkpoint(storage)
    for weights in checkpoint.glob("step-*/weights.safetensors"):
        with open(weights, "r+b") as handle:
            handle.truncate(weights.stat().st_size // 2)

    instance = DagsterInstance.ephemeral()
    again = materialize_model(str(storage), instance=instance)

    assert again.success
    warnings = [text for level, text in logs(instance, again) if level == logging.WARNING]
    assert any("weights.safetensors" in text and "starting the training over" in text
               for text in warnings), warnings  # fmt: skip
    assert not checkpoint.exists()  # removed after success
