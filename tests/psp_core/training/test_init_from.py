"""train(init_from=...) and psp train --init-from: a run that starts from a bundle's weights,
refused before any work when the bundle's vocabulary is not the training file's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from psp_core import TrainConfig, train
from psp_core.cli import main
from psp_core.models.bundle import load_bundle
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training import InitFromMismatchError
from psp_core.training.checkpoint import CheckpointMismatchError
from tests.conftest import random_model, toy_sentencepiece, write_training_file
from tests.psp_core.cli_runs import one_error_line

QUICK = dict(dim=32, batch_size=32, max_megabatch=4, anneal_every=5, log_every=0, lr=0.05)


def first_losses(data, spm, output, steps: int, **options) -> list[float]:
    losses: list[float] = []
    config = TrainConfig(**QUICK, epochs=1, max_steps=steps)
    train(data, spm, output, config, on_step=lambda _, loss: losses.append(loss), **options)
    return losses


@pytest.fixture(scope="module")
def trained(tmp_path_factory, toy_training_file, spm_path):
    """A bundle trained for two epochs on the toy pairs."""
    output = tmp_path_factory.mktemp("trained") / "model"
    return train(toy_training_file, spm_path, output, TrainConfig(**QUICK, epochs=2)).bundle


def test_a_run_starts_from_the_bundles_weights(tmp_path, trained, toy_training_file, spm_path):
    # no step: the new bundle is the old one's table, exactly
    result = train(
        toy_training_file,
        spm_path,
        tmp_path / "copy",
        TrainConfig(**QUICK, epochs=1, max_steps=0),
        init_from=trained,
    )
    assert np.array_equal(load_bundle(result.bundle)[2], load_bundle(trained)[2])
    record = json.loads((result.bundle / "config.json").read_text())["training"]
    assert record["init_from"]["bundle"] == str(trained)
    # the first steps' loss: far below a random start's on the same pairs in the same order
    continued = first_losses(toy_training_file, spm_path, tmp_path / "a", 3, init_from=trained)
    scratch = first_losses(toy_training_file, spm_path, tmp_path / "b", 3)
    assert max(continued) < 0.5 * min(scratch), (continued, scratch)


def test_a_checkpoint_takes_precedence_and_must_have_started_from_the_same_weights(
    tmp_path, trained, toy_training_file, spm_path, tokenizer
):
    output = tmp_path / "model"
    assert len(first_losses(toy_training_file, spm_path, output, 2, init_from=trained)) == 2
    # resumed: the checkpoint's weights and step, not the bundle's again
    steps: list[int] = []
    config = TrainConfig(**QUICK, epochs=1, max_steps=4)
    train(
        toy_training_file,
        spm_path,
        output,
        config,
        init_from=trained,
        keep_checkpoint=True,
        on_step=lambda step, _: steps.append(step),
    )
    assert steps == [3, 4]
    other = random_model(tokenizer, dim=32, seed=5).save(tmp_path / "other")
    for init_from in (other, None):  # another start, or none: another run
        with pytest.raises(CheckpointMismatchError, match="init_from"):
            train(toy_training_file, spm_path, output, config, init_from=init_from)


@pytest.fixture(scope="module")
def other_vocabulary(tmp_path_factory, toy):
    """A training file of the toy pairs encoded with another sentencepiece model, and it."""
    folder = tmp_path_factory.mktemp("other")
    proto = toy_sentencepiece(toy, 2000, 300, seed=7, character_coverage=1.0)
    (folder / "other.model").write_bytes(proto)
    write_training_file(folder / "other.h5", Tokenizer(proto), toy.pairs(500))
    return folder / "other.h5", folder / "other.model"


def test_another_vocabulary_is_refused_before_any_work(
    tmp_path, capsys, tokenizer, other_vocabulary
):
    bundle = random_model(tokenizer, dim=32).save(tmp_path / "bundle")
    data, spm = other_vocabulary
    output = tmp_path / "out"
    argv = ["train", "--data", str(data), "--spm", str(spm), "--output", str(output)]
    argv += ["--init-from", str(bundle), "--epochs", "1", "--device", "cpu"]
    assert main([*argv, "--dim", "32"]) == 2
    one_error_line(capsys.readouterr().err, "sentencepiece model", str(bundle), str(data))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # nothing written
    # the Python API refuses it the same way
    with pytest.raises(InitFromMismatchError, match="sentencepiece model"):
        train(data, spm, output, TrainConfig(**QUICK, epochs=1), init_from=bundle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_another_dimension_is_refused(tmp_path, capsys, tokenizer, toy_training_file, spm_path):
    bundle = random_model(tokenizer, dim=16).save(tmp_path / "bundle")
    argv = ["train", "--data", str(toy_training_file), "--spm", str(spm_path)]
    argv += ["--output", str(tmp_path / "out"), "--init-from", str(bundle), "--dim", "32"]
    assert main(argv) == 2
    one_error_line(capsys.readouterr().err, "dim 16", "--dim 16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
