"""Multi-process data-parallel training: the gradient averaging and a real torchrun launch."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from psp_core import load_model
from psp_core.training.distributed import DistributedContext, context_from_environment
from psp_core.training.encoder import MeanEmbeddingEncoder
from tests.conftest import write_training_file
from tests.psp_core.cli.test_cli import write_sts_file

REPO_ROOT = Path(__file__).resolve().parents[3]
VOCAB, DIM = 12, 3

# (row ids of rank 0, row ids of rank 1): overlapping, disjoint, unequal counts, one rank empty
SPARSE_CASES = [
    ([1, 3, 4], [0, 3, 7, 9]),
    ([2, 5], [6, 8]),
    ([0, 1, 2, 3, 4, 5, 6], [11]),
    ([4, 10], []),
]


def _case_rows(case: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor(SPARSE_CASES[case][rank], dtype=torch.int64)
    generator = torch.Generator().manual_seed(100 * case + rank)
    return ids, torch.randn(len(ids), DIM, generator=generator)


def _average_sparse_worker(rank: int, store_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    try:
        context = DistributedContext(rank=rank, world_size=2)
        results = {}
        for case in range(len(SPARSE_CASES)):
            ids, rows = _case_rows(case, rank)
            averaged_ids, averaged_rows = context.average_sparse(ids, rows)
            results[case] = (averaged_ids, averaged_rows)
        tensors = {}
        for case, (averaged_ids, averaged_rows) in results.items():
            tensors[f"{case}.ids"] = averaged_ids.contiguous()
            tensors[f"{case}.rows"] = averaged_rows.contiguous()
        save_file(tensors, os.path.join(out_dir, f"rank{rank}.safetensors"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_average_sparse_is_the_mean_of_the_ranks_dense_gradients(tmp_path):
    mp.spawn(
        _average_sparse_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True
    )
    per_rank = []
    for rank in range(2):
        tensors = load_file(tmp_path / f"rank{rank}.safetensors")
        per_rank.append(
            {
                case: (tensors[f"{case}.ids"], tensors[f"{case}.rows"])
                for case in range(len(SPARSE_CASES))
            }
        )
    for case, (ids0, ids1) in enumerate(SPARSE_CASES):
        expected = torch.zeros(VOCAB, DIM)
        for rank in range(2):
            ids, rows = _case_rows(case, rank)
            dense = torch.zeros(VOCAB, DIM)
            dense[ids] = rows
            expected += dense / 2
        averaged_ids, averaged_rows = per_rank[0][case]
        assert averaged_ids.tolist() == sorted(set(ids0) | set(ids1))
        got = torch.zeros(VOCAB, DIM)
        got[averaged_ids] = averaged_rows
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-7)
        # both ranks hold bit-identical results: they apply the same update
        assert torch.equal(per_rank[1][case][0], averaged_ids)
        assert torch.equal(per_rank[1][case][1], averaged_rows)


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, DistributedContext(0, 1, 0)),
        ({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}, DistributedContext(0, 1, 0)),
        ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}, DistributedContext(3, 4, 1)),
    ],
)
def test_context_from_environment(monkeypatch, environment, expected):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    context = context_from_environment()
    assert context == expected
    assert context.is_main == (expected.rank == 0)
    assert context.is_distributed == (expected.world_size > 1)


@pytest.mark.parametrize(
    "environment", [{"WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "two", "RANK": "0"}]
)
def test_context_from_environment_rejects_inconsistent_values(monkeypatch, environment):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        context_from_environment()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun_train(data: Path, spm_path: Path, output: Path, *options: str):
    """``psp train`` under torchrun with 2 CPU processes; returns the run and each rank's digest."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    argv += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    argv += ["-m", "psp_core.cli", "train", "--data", str(data), "--spm", str(spm_path)]
    argv += ["--output", str(output), "--dim", "16", "--max-megabatch", "2"]
    argv += ["--anneal-every", "0", "--batch-size", "16", "--lr", "0.05", "--device", "cpu"]
    argv += ["--num-threads", "1", "--log-every", "0", *options]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    completed = subprocess.run(
        argv, capture_output=True, text=True, env=environment, timeout=120, cwd=REPO_ROOT
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    digests = dict(re.findall(r"rank (\d) final weights sha256 ([0-9a-f]{64})", completed.stderr))
    assert set(digests) == {"0", "1"}, completed.stderr[-3000:]
    assert completed.stdout.count('"bundle"') == 1  # only rank 0 reports
    return completed, digests


def _assert_trained_replicas(output: Path, digests: dict, tokenizer, steps: int) -> None:
    """Both ranks ended with the same weights, and the bundle rank 0 wrote was trained on the
    two: every step counted once, most pieces moved, its default checkpoint removed."""
    assert digests["0"] == digests["1"]
    trained = load_model(output)
    assert trained.config.training["world_size"] == 2
    assert trained.config.training["steps"] == steps
    assert np.isfinite(trained.config.training["history"][0]["loss"])
    initial = MeanEmbeddingEncoder(tokenizer.vocab_size, 16)
    initial.reset_parameters(torch.Generator().manual_seed(1))
    changed = ~np.isclose(trained.weight.numpy(), initial.weight.detach().numpy()).all(axis=1)
    assert changed.mean() > 0.3  # most pieces were trained
    assert not output.with_name(f"{output.name}.checkpoint").exists()


@pytest.mark.slow
def test_torchrun_two_processes_train_identical_replicas_with_the_dense_optimizer(
    tmp_path, toy, tokenizer, spm_path
):
    """(The default, sparse optimizer: the straight run of the resume test below.)"""
    data = write_training_file(tmp_path / "train.h5", tokenizer, toy.pairs(600, seed=5))
    output = tmp_path / "bundle"
    _, digests = _torchrun_train(data, spm_path, output, "--epochs", "1", "--optimizer", "dense")
    # 600 pairs, 2 ranks x a mega-batch of 2 x 16 pairs = 64 pairs: 9 full mega-batches of
    # 2 steps, then 24 pairs (12 per rank: one short step each). A step is one mini-batch on
    # every rank.
    _assert_trained_replicas(output, digests, tokenizer, steps=9 * 2 + 1)


@pytest.mark.slow
def test_torchrun_resumes_exactly_with_dev_selection(tmp_path, toy, tokenizer, spm_path):
    data = write_training_file(tmp_path / "train.h5", tokenizer, toy.pairs(300, seed=6))
    dev = write_sts_file(tmp_path / "dev.tsv", toy.pairs(20, seed=77))
    options = ("--epochs", "2", "--dev-sts", str(dev), "--checkpoint-every", "2")
    _, straight = _torchrun_train(data, spm_path, tmp_path / "straight", *options)
    # (300 pairs: 4 full mega-batches of 2 steps, then 44 pairs, 22 a rank: 2 steps)
    _assert_trained_replicas(tmp_path / "straight", straight, tokenizer, steps=2 * (4 * 2 + 2))

    checkpoint = tmp_path / "checkpoint"
    resumable = (*options, "--checkpoint-dir", str(checkpoint))
    _torchrun_train(data, spm_path, tmp_path / "stopped", *resumable, "--max-steps", "5")
    assert (checkpoint / "LATEST").is_file()
    run, resumed = _torchrun_train(data, spm_path, tmp_path / "resumed", *resumable)
    # both ranks resumed from the checkpoint rank 0 wrote (300 pairs: 10 steps an epoch)
    assert run.stderr.count("at epoch 0 step 6") == 2, run.stderr[-3000:]

    assert straight["0"] == straight["1"] == resumed["0"] == resumed["1"]
    first, second = load_model(tmp_path / "straight"), load_model(tmp_path / "resumed")
    assert torch.equal(first.weight, second.weight)  # the best epoch's table
    assert [e["dev_score"] for e in first.config.training["history"]] == [
        e["dev_score"] for e in second.config.training["history"]
    ]
    assert first.config.training["best_epoch"] == second.config.training["best_epoch"]
