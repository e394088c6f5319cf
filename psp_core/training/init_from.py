"""Continuing training from a model bundle (``train(init_from=...)``, ``psp train --init-from``).

A bundle keeps the embedding table and its sentencepiece model, not the optimizer's moments
(those live only in a run's checkpoint, which is removed when the run ends), so a run started
from a bundle begins with the bundle's weights and a fresh optimizer, at step 0 of its own
schedule (the mega-batch anneals from 1 again).

The bundle must have been trained with the sentencepiece model the training file was encoded
with: row ``i`` of its table is piece ``i`` of that vocabulary and of no other. The check
compares the sha256 of the sentencepiece model recorded in the training file with the one in
the bundle's ``config.json``, and the dimension with the run's, before any weight is read or
any file written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from psp_core.models.bundle import load_bundle, read_config
from psp_core.training.training_file import TrainingFileInfo

#: the fingerprint key of the starting weights: a checkpoint resumes only the run that started
#: from the same ones (or from none)
INIT_KEY = "init_from_xxh3_128"


class InitFromMismatchError(ValueError):
    """The bundle to start from does not fit the training file or the run's settings."""


@dataclass(frozen=True)
class InitialWeights:
    """The table a run starts from, where it came from and its checksum."""

    bundle: Path
    table: np.ndarray
    checksum: str

    def summary(self) -> dict[str, str]:
        """What the new bundle's training record says about its start."""
        return {"bundle": str(self.bundle), "embeddings_xxh3_128": self.checksum}


def check_init_from(bundle: str | Path, info: TrainingFileInfo, dim: int, data: str | Path) -> None:
    """Refuse ``bundle`` unless its vocabulary is the one ``data`` was encoded with and its
    dimension is ``dim``; reads only its ``config.json``."""
    config = read_config(bundle)
    if config.spm_sha256 != info.spm_sha256 or config.vocab_size != info.vocab_size:
        raise InitFromMismatchError(
            f"cannot start from {bundle}: its sentencepiece model (sha256 "
            f"{config.spm_sha256[:12]}..., {config.vocab_size} pieces) is not the one {data} "
            f"was encoded with (sha256 {info.spm_sha256[:12]}..., {info.vocab_size} pieces); "
            "encode the training file with the bundle's sentencepiece.model"
        )
    if config.dim != dim:
        raise InitFromMismatchError(
            f"cannot start from {bundle}: its embeddings have dim {config.dim}, the run's dim "
            f"is {dim} (pass --dim {config.dim})"
        )


def load_initial_weights(
    bundle: str | Path, info: TrainingFileInfo, dim: int, data: str | Path
) -> InitialWeights:
    """The checked bundle's table (its files verified as any load verifies them)."""
    check_init_from(bundle, info, dim, data)
    _, _, table = load_bundle(bundle)
    checksum = xxhash.xxh3_128(np.ascontiguousarray(table)).hexdigest()
    return InitialWeights(Path(bundle), table, checksum)
