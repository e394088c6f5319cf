"""The CUDA path: one training step and one embed call give on a GPU what they give
on the CPU, within float tolerance. Marked ``gpu``; skipped, with a message, without one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from psp_core import load_model
from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training.data import PairBatch
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.optim import build_optimizer
from psp_core.training.steps import StepSettings, train_megabatch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device here: the GPU tests run on one"
    ),
]


def _mega_batch(n: int, vocab_size: int) -> PairBatch:
    rng = np.random.default_rng(0)
    sources = [rng.integers(1, vocab_size, rng.integers(3, 12)).tolist() for _ in range(n)]
    targets = [ids[: len(ids) // 2] + rng.integers(1, vocab_size, 3).tolist() for ids in sources]
    return PairBatch(flatten_id_lists(sources), flatten_id_lists(targets))


@pytest.mark.parametrize("optimizer", ["sparse", "dense"])
def test_a_training_step_on_cuda_matches_the_cpu(optimizer: str) -> None:
    mega = _mega_batch(64, 500)
    results = {}
    for device in (torch.device("cpu"), torch.device("cuda")):
        model = MeanEmbeddingEncoder(500, 64, sparse=optimizer == "sparse")
        model.reset_parameters(torch.Generator().manual_seed(1))
        model.to(device)
        settings = StepSettings(
            batch_size=16,
            margin=0.4,
            grad_clip=5.0,
            negatives_from="opposite",
            mining_chunk_rows=32,
            mining_screen=False,
            device=device,
        )
        optimizer_ = build_optimizer(model, optimizer, 0.01)
        losses = train_megabatch(model, optimizer_, mega, settings, first_step=0)
        results[device.type] = (losses, model.weight.detach().cpu())
    cpu_losses, cpu_weights = results["cpu"]
    cuda_losses, cuda_weights = results["cuda"]
    np.testing.assert_allclose(cuda_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cuda_weights, cpu_weights, rtol=1e-4, atol=1e-5)


def test_embed_on_cuda_matches_the_cpu(bundle) -> None:
    sentences = ["a cat sits on the mat", "the dog runs", "", "a b c d e f g"]
    on_cpu = load_model(bundle, device="cpu").embed(sentences)
    on_gpu = load_model(bundle, device="cuda")
    assert on_gpu.weight.is_cuda
    np.testing.assert_allclose(on_gpu.embed(sentences), on_cpu, rtol=1e-5, atol=1e-6)
    assert load_model(bundle, device="auto").weight.is_cuda
