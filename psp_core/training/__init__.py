"""Training: configuration, the loop, checkpoints.

Names are imported on first use, so ``psp_core.training.progress`` (used by the preparation
stages) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psp_core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from psp_core.training.checkpoint import (
        CheckpointDamagedError,
        CheckpointMismatchError,
        CheckpointWriteError,
    )
    from psp_core.training.config import TrainConfig
    from psp_core.training.init_from import InitFromMismatchError
    from psp_core.training.steps import NonFiniteLossError
    from psp_core.training.trainer import TrainResult, train

_EXPORTS = {
    "CheckpointDamagedError": "psp_core.training.checkpoint",
    "CheckpointMismatchError": "psp_core.training.checkpoint",
    "CheckpointWriteError": "psp_core.training.checkpoint",
    "InitFromMismatchError": "psp_core.training.init_from",
    "NonFiniteLossError": "psp_core.training.steps",
    "TrainConfig": "psp_core.training.config",
    "TrainResult": "psp_core.training.trainer",
    "train": "psp_core.training.trainer",
}

__all__ = [
    "CheckpointDamagedError",
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "InitFromMismatchError",
    "NonFiniteLossError",
    "TrainConfig",
    "TrainResult",
    "train",
]
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
