"""Training: configuration, the loop, checkpoints."""

from psp_core.training.checkpoint import CheckpointMismatchError, CheckpointWriteError
from psp_core.training.config import TrainConfig
from psp_core.training.steps import NonFiniteLossError
from psp_core.training.trainer import TrainResult, train

__all__ = [
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "NonFiniteLossError",
    "TrainConfig",
    "TrainResult",
    "train",
]
