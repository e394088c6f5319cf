import copy
import io
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import sentencepiece as spm
import torch

from psp_core import NonFiniteLossError, TrainConfig, load_model, train
from psp_core.training.checkpoint import CheckpointMismatchError, CheckpointStore
from psp_core.training.data import EpochStream, PairBatch
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.optim import LazyAdam, clip_gradient_norm
from psp_core.training.training_file import TrainingFile
from tests.conftest import write_training_file

QUICK = dict(dim=32, batch_size=32, max_megabatch=4, anneal_every=5, log_every=0, lr=0.05)


def pair_keys(batch):
    return [
        (tuple(batch.source.sentence(i)), tuple(batch.target.sentence(i)))
        for i in range(len(batch))
    ]


def test_epoch_stream_is_a_seeded_permutation_and_resumes_at_any_position(toy_training_file):
    with TrainingFile(toy_training_file) as data:
        stored = pair_keys(PairBatch(*data.read(0, len(data))))
        epoch0 = EpochStream(data, seed=3, epoch=0, block_size=300)
        first = pair_keys(epoch0.take(50)) + pair_keys(epoch0.take(10_000))
        assert len(epoch0.take(10)) == 0
        assert sorted(first) == sorted(stored) and first != stored
        again = EpochStream(data, seed=3, epoch=0, block_size=300)
        assert pair_keys(again.take(len(data))) == first
        epoch1 = pair_keys(EpochStream(data, seed=3, epoch=1, block_size=300).take(len(data)))
        assert sorted(epoch1) == sorted(stored) and epoch1 != first
        for start in (0, 1, 299, 300, 301, 1999):
            resumed = EpochStream(data, seed=3, epoch=0, block_size=300, start=start)
            assert pair_keys(resumed.take(len(data))) == first[start:]


def test_sparse_and_dense_clipping_agree():
    torch.manual_seed(0)
    ids = torch.tensor([1, 2, 2, 3, 1, 1])
    offsets = torch.tensor([0, 2, 6])
    grads = {}
    for sparse in (True, False):
        torch.manual_seed(0)
        encoder = MeanEmbeddingEncoder(5, 4, sparse=sparse)
        (encoder(ids, offsets).sum() * 100).backward()
        norm = clip_gradient_norm(list(encoder.parameters()), 1.0)
        grads[sparse] = (norm, encoder.weight.grad.to_dense() if sparse else encoder.weight.grad)
    assert grads[True][0] == pytest.approx(grads[False][0], rel=1e-5)
    assert torch.allclose(grads[True][1], grads[False][1], atol=1e-6)
    assert grads[True][1].norm().item() == pytest.approx(1.0, rel=1e-4)


def test_dropout_path_matches_embedding_bag_without_dropout():
    encoder = MeanEmbeddingEncoder(10, 6, dropout=0.3)
    ids, offsets = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 3, 3, 5])
    encoder.eval()
    plain = encoder(ids, offsets)
    encoder.train()
    dropped = encoder(ids, offsets)
    assert torch.equal(plain[1], torch.zeros(6))  # empty sentence -> zero vector
    assert not torch.allclose(plain, dropped)
    encoder.dropout = 0.0
    assert torch.allclose(encoder(ids, offsets), plain)
    rows = encoder.weight[torch.tensor([1, 2, 3])]
    assert torch.allclose(plain[0], rows.mean(0))


def retrieval_accuracy(model, pairs):
    source = model.embed([p[0] for p in pairs], normalize=True)
    target = model.embed([p[1] for p in pairs], normalize=True)
    return float(np.mean((source @ target.T).argmax(1) == np.arange(len(pairs))))


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sparse", "dense"])
def test_training_learns_translations(tmp_path, toy, toy_training_file, spm_path, optimizer):
    untrained = train(
        toy_training_file, spm_path, tmp_path / "m0", TrainConfig(**QUICK, epochs=1, max_steps=0)
    )
    result = train(
        toy_training_file,
        spm_path,
        tmp_path / "m",
        TrainConfig(**QUICK, epochs=2, optimizer=optimizer),
    )
    held_out = toy.pairs(300, seed=12345)
    before = retrieval_accuracy(load_model(untrained.bundle), held_out)
    after = retrieval_accuracy(load_model(result.bundle), held_out)
    assert after > before + 0.2, (before, after)
    losses = [record["loss"] for record in result.state.history]
    assert losses[1] < losses[0]
    config = json.loads((result.bundle / "config.json").read_text())
    assert config["languages"] == ["en", "xx"]
    assert config["training"]["epochs_completed"] == 2
    assert not (tmp_path / "m.checkpoint").exists()  # removed after success


class Killed(Exception):
    pass


def losses(history: list[dict]) -> list[tuple[int, int, float]]:
    return [(record["epoch"], record["steps"], record["loss"]) for record in history]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("optimizer", "dropout", "lr_decay"),
    [("sparse", 0.2, "constant"), ("dense", 0.0, "constant"), ("sparse", 0.0, "linear")],
)
def test_killed_run_resumes_to_identical_weights(
    tmp_path, toy_training_file, spm_path, optimizer, dropout, lr_decay
):
    config = TrainConfig(
        **QUICK,
        epochs=2,
        checkpoint_every=7,
        optimizer=optimizer,
        dropout=dropout,
        lr_decay=lr_decay,
    )
    reference = train(toy_training_file, spm_path, tmp_path / "ref", config)

    def kill_at_step_40(step, loss):
        if step == 40:
            raise Killed

    with pytest.raises(Killed):
        train(toy_training_file, spm_path, tmp_path / "run", config, on_step=kill_at_step_40)
    latest = CheckpointStore(tmp_path / "run.checkpoint").latest
    state = json.loads((latest / "state.json").read_text())
    assert 0 < state["state"]["step"] < 40  # a mid-epoch checkpoint exists
    torch.manual_seed(12345)  # a resumed process starts with another global RNG state
    resumed = train(toy_training_file, spm_path, tmp_path / "run", config)
    expected = load_model(reference.bundle).weight
    assert torch.equal(load_model(resumed.bundle).weight, expected)
    assert resumed.state.step == reference.state.step
    # the interrupted epoch's record covers the whole epoch, not only the steps after the resume
    assert losses(resumed.state.history) == losses(reference.state.history)
    assert all(record["pairs_per_second"] > 0 for record in resumed.state.history)


def test_changed_settings_refuse_to_resume(tmp_path, toy_training_file, spm_path):
    config = TrainConfig(**QUICK, epochs=1, max_steps=3)
    train(toy_training_file, spm_path, tmp_path / "m", config)
    assert CheckpointStore(tmp_path / "m.checkpoint").exists()  # stopped early: kept to resume
    changed = TrainConfig(**(QUICK | {"lr": 0.01}), epochs=1)
    with pytest.raises(CheckpointMismatchError, match="lr"):
        train(toy_training_file, spm_path, tmp_path / "m", changed)
    fresh = train(toy_training_file, spm_path, tmp_path / "m", changed, resume=False)
    assert fresh.state.epoch == 1


def test_a_checkpoint_of_an_earlier_release_resumes_at_the_settings_it_had(
    tmp_path, toy_training_file, spm_path
):
    """A checkpoint written before lr_decay existed lacks it in its fingerprint: it resumes at
    its old value (constant) and is refused at others."""
    config = TrainConfig(**QUICK, epochs=1, max_steps=3)
    train(toy_training_file, spm_path, tmp_path / "m", config)
    store = CheckpointStore(tmp_path / "m.checkpoint")
    state_file = store.latest / "state.json"
    payload = json.loads(state_file.read_text())
    for added in TrainConfig.ADDED_LATER:
        del payload["fingerprint"][added]
    state_file.write_text(json.dumps(payload))
    with pytest.raises(CheckpointMismatchError, match="lr_decay 'constant' -> 'linear'"):
        train(
            toy_training_file,
            spm_path,
            tmp_path / "m",
            TrainConfig(**QUICK, epochs=1, lr_decay="linear"),
        )
    resumed = train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))
    assert resumed.state.step > 3  # went on from step 3


def test_a_checkpoint_holding_a_removed_setting_resumes_only_at_its_neutral_value(
    tmp_path, toy_training_file, spm_path
):
    """A checkpoint of a release that had a setting since removed resumes when the setting held
    the value that trains as the code does now, and is refused otherwise; state it kept for
    the removed setting is ignored."""
    config = TrainConfig(**QUICK, epochs=1, max_steps=3)
    train(toy_training_file, spm_path, tmp_path / "m", config)
    state_file = CheckpointStore(tmp_path / "m.checkpoint").latest / "state.json"
    original = json.loads(state_file.read_text())
    for name, neutral in TrainConfig.REMOVED.items():
        payload = json.loads(json.dumps(original))
        payload["fingerprint"][name] = "other" if isinstance(neutral, str) else neutral + 1
        state_file.write_text(json.dumps(payload))
        with pytest.raises(CheckpointMismatchError, match=name):
            train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))
    payload = json.loads(json.dumps(original))
    payload["fingerprint"].update(TrainConfig.REMOVED)
    payload["state"]["candidate_slots"] = {"0": [0, 1]}
    state_file.write_text(json.dumps(payload))
    resumed = train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))
    assert resumed.state.step > 3  # went on from step 3


def test_a_decaying_learning_rate_keeps_its_length_on_resume(tmp_path, toy_training_file, spm_path):
    # epochs may change on resume at a constant rate (more epochs of the same run), but with a
    # linear decay they set every step's rate
    config = TrainConfig(**QUICK, epochs=2, max_steps=3, lr_decay="linear")
    train(toy_training_file, spm_path, tmp_path / "m", config)
    with pytest.raises(CheckpointMismatchError, match="epochs"):
        train(
            toy_training_file,
            spm_path,
            tmp_path / "m",
            TrainConfig(**QUICK, epochs=3, lr_decay="linear"),
        )
    # a max_steps stop resumes on the same schedule (it decays over all the epochs' steps)
    finished = train(
        toy_training_file,
        spm_path,
        tmp_path / "m",
        TrainConfig(**QUICK, epochs=2, lr_decay="linear"),
    )
    assert finished.state.epoch == 2 and finished.state.step > 3
    constant = TrainConfig(**QUICK, epochs=2, max_steps=3)
    train(toy_training_file, spm_path, tmp_path / "c", constant)
    resumed = train(toy_training_file, spm_path, tmp_path / "c", TrainConfig(**QUICK, epochs=3))
    assert resumed.state.epoch == 3


def test_linear_decay_trains_differently_from_a_constant_rate(
    tmp_path, toy_training_file, spm_path
):
    weights = {}
    for decay in ("constant", "linear"):
        result = train(
            toy_training_file,
            spm_path,
            tmp_path / decay,
            TrainConfig(**QUICK, epochs=1, lr_decay=decay),
        )
        weights[decay] = load_model(result.bundle).weight
    # the first step is the same (both at lr), the later ones smaller under the decay
    assert not torch.equal(weights["constant"], weights["linear"])


def test_non_finite_loss_stops_with_the_step(tmp_path, toy_training_file, spm_path):
    with pytest.raises(NonFiniteLossError, match="at step 1"):
        train(
            toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, margin=float("nan"))
        )


def test_model_selection_keeps_the_best_epoch(tmp_path, toy_training_file, spm_path):
    scores = iter([3.0, 5.0, 1.0])
    seen = []

    def evaluator(model):
        seen.append(model.weight.clone())
        return next(scores)

    result = train(
        toy_training_file,
        spm_path,
        tmp_path / "m",
        TrainConfig(**QUICK, epochs=3),
        dev_evaluator=evaluator,
    )
    assert result.state.best_epoch == 1
    assert [r["dev_score"] for r in result.state.history] == [3.0, 5.0, 1.0]
    assert torch.equal(load_model(result.bundle).weight, seen[1])
    assert not torch.equal(seen[1], seen[2])


def test_data_and_tokenizer_must_match(tmp_path, toy, toy_training_file):
    other = io.BytesIO()
    sentences = [s.lower() for pair in toy.pairs(500, seed=8) for s in pair]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=other, vocab_size=150, minloglevel=2
    )
    (tmp_path / "other.model").write_bytes(other.getvalue())
    with pytest.raises(ValueError, match="encoded with sentencepiece model sha256"):
        train(toy_training_file, tmp_path / "other.model", tmp_path / "m", TrainConfig(**QUICK))
    (tmp_path / "garbage.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="garbage.model: not a valid sentencepiece model"):
        train(toy_training_file, tmp_path / "garbage.model", tmp_path / "m", TrainConfig(**QUICK))


def test_paraphrase_files_mine_from_both_sides(tmp_path, toy, tokenizer, spm_path):
    pairs = [(a, a.lower() + " " + a.split()[0].lower()) for a, _ in toy.pairs(600, seed=5)]
    path = write_training_file(tmp_path / "para.h5", tokenizer, pairs, lang="en", kind="paraphrase")
    result = train(path, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))
    config = json.loads((result.bundle / "config.json").read_text())
    assert config["training"]["negatives_from"] == "any"
    assert config["languages"] == ["en"]


@pytest.mark.slow
def test_sigkilled_psp_train_resumes_to_identical_weights(tmp_path, toy_training_file, spm_path):
    """A real kill (SIGKILL of the `psp train` process), not an exception."""
    flags = dict(QUICK, epochs=4, checkpoint_every=5, num_threads=1, dropout=0.1)
    reference = train(toy_training_file, spm_path, tmp_path / "ref", TrainConfig(**flags))
    argv = [sys.executable, "-m", "psp_core.cli", "train", "--data", str(toy_training_file)]
    argv += ["--spm", str(spm_path), "--output", str(tmp_path / "run")]
    for name, value in flags.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    store = CheckpointStore(tmp_path / "run.checkpoint")
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not store.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "training finished before it could be killed"
    assert not (tmp_path / "run").exists()
    completed = subprocess.run(argv, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert "resuming from" in completed.stderr
    assert torch.equal(load_model(tmp_path / "run").weight, load_model(reference.bundle).weight)
    history = json.loads(completed.stdout)["history"]
    assert losses(history) == losses(reference.state.history)


@pytest.mark.parametrize("piece_rows", [LazyAdam.PIECE_ROWS, 2])  # one piece; several
def test_lazy_adam_matches_torch_sparse_adam(piece_rows):
    torch.manual_seed(0)
    reference = torch.nn.Parameter(torch.randn(20, 5))
    ours = torch.nn.Parameter(reference.detach().clone())
    torch_optimizer = torch.optim.SparseAdam([reference], lr=0.01)
    lazy = LazyAdam([ours], lr=0.01)
    lazy.PIECE_ROWS = piece_rows
    for step in range(30):
        rows = torch.tensor([step % 20, (3 * step) % 20, 7, 7])  # a repeated row
        values = torch.randn(4, 5)
        for param, optimizer in ((reference, torch_optimizer), (ours, lazy)):
            param.grad = torch.sparse_coo_tensor(
                rows.unsqueeze(0), values, (20, 5), check_invariants=False
            )
            optimizer.step()
    assert torch.allclose(ours, reference, atol=1e-6)
    assert torch.allclose(
        lazy.state[ours]["exp_avg_sq"], torch_optimizer.state[reference]["exp_avg_sq"], atol=1e-7
    )
    untouched = [
        r
        for r in range(20)
        if r not in {s % 20 for s in range(30)} | {(3 * s) % 20 for s in range(30)} | {7}
    ]
    assert all(torch.equal(lazy.state[ours]["exp_avg"][r], torch.zeros(5)) for r in untouched)


def test_lazy_adam_state_goes_back_into_one_and_what_does_not_fit_is_refused():
    """``state_dict`` / ``load_state_dict`` in ``torch.optim``'s format: a second optimizer given
    the first's state steps to the same weights; other groups or shapes are a ValueError."""
    torch.manual_seed(1)
    first = torch.nn.Parameter(torch.randn(12, 4))
    second = torch.nn.Parameter(first.detach().clone())
    optimizer = LazyAdam([first], lr=0.01)

    def sparse_step(optimizer, param, rows, values):
        param.grad = torch.sparse_coo_tensor(rows.unsqueeze(0), values, tuple(param.shape))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        assert param.grad is None

    grads = [(torch.tensor([i % 12, 5]), torch.randn(2, 4)) for i in range(6)]
    for rows, values in grads[:3]:
        sparse_step(optimizer, first, rows, values)
    saved = optimizer.state_dict()
    assert saved["param_groups"] == [{"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8,
                                      "params": [0]}]  # fmt: skip
    assert sorted(saved["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    with torch.no_grad():
        second.copy_(first)
    resumed = LazyAdam([second], lr=0.5)  # (the saved rate is taken back)
    # as a checkpoint gives it back: tensors of its own, the betas a JSON list
    copied = copy.deepcopy(saved)
    copied["param_groups"][0]["betas"] = [0.9, 0.999]
    resumed.load_state_dict(copied)
    assert resumed.param_groups[0]["lr"] == 0.01
    for rows, values in grads[3:]:
        sparse_step(optimizer, first, rows, values)
        sparse_step(resumed, second, rows, values)
    assert torch.equal(first, second)
    other_shape = LazyAdam([torch.nn.Parameter(torch.zeros(13, 4))])
    with pytest.raises(ValueError, match="exp_avg is"):
        other_shape.load_state_dict(saved)
    two = LazyAdam([torch.nn.Parameter(torch.zeros(12, 4)), torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match="parameter groups differ"):
        two.load_state_dict(saved)


def test_training_with_the_default_optimizer_does_not_import_torch_dynamo(
    tmp_path, toy_training_file, spm_path
):
    """``torch.optim.Optimizer`` imports ``torch._dynamo`` on first use, a large part of a
    training process's start; the default (sparse) optimizer does without it, writing
    checkpoints included."""
    script = (
        "import sys; from psp_core import TrainConfig, train\n"
        "train(sys.argv[1], sys.argv[2], sys.argv[3], TrainConfig(dim=8, batch_size=16, "
        "max_megabatch=1, max_steps=4, checkpoint_every=2, log_every=0))\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))"
    )
    child = subprocess.run(
        [sys.executable, "-c", script, str(toy_training_file), str(spm_path), str(tmp_path / "m")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gathered_rows_give_the_table_gradient(dropout):
    """The training path (distinct rows gathered, gradient scattered back) equals autograd on
    the whole table."""
    ids = torch.tensor([4, 1, 4, 9, 1, 1, 2])
    offsets = torch.tensor([0, 3, 3, 7])
    encoder = MeanEmbeddingEncoder(12, 6, dropout=dropout)
    encoder.train()
    torch.manual_seed(5)
    encoder(ids, offsets).pow(2).sum().backward()
    expected = encoder.weight.grad.clone()
    unique, local = torch.unique(ids, return_inverse=True)
    rows = encoder.weight.detach().index_select(0, unique).requires_grad_()
    torch.manual_seed(5)
    encoder.forward_rows(rows, local, offsets).pow(2).sum().backward()
    scattered = torch.zeros_like(expected).index_add_(0, unique, rows.grad)
    assert torch.allclose(scattered, expected, atol=1e-6)
