"""psp_core: P-SP paraphrastic sentence embeddings (Wieting et al.), the model library.

The public surface::

    from psp_core import load_model, train, TrainConfig

    model = load_model("models/de")
    vectors = model.embed(["Hallo Welt", "hello world"], normalize=True)
    similarities = model.score([("a cat sits", "a cat is sitting")])
"""

from psp_core.bundle import BundleConfig, BundleError
from psp_core.model import PSPModel, load_model
from psp_core.tokenizer import Tokenizer
from psp_core.training import NonFiniteLossError, TrainConfig, TrainResult, train
from psp_core.training_file import TrainingFile, TrainingFileWriter

__all__ = [
    "BundleConfig",
    "BundleError",
    "NonFiniteLossError",
    "PSPModel",
    "Tokenizer",
    "TrainConfig",
    "TrainResult",
    "TrainingFile",
    "TrainingFileWriter",
    "load_model",
    "train",
]
