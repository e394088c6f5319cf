"""psp_core: P-SP paraphrastic sentence embeddings (Wieting et al.), the model library.

The public surface::

    from psp_core import load_model, train, TrainConfig

    model = load_model("models/de")
    vectors = model.embed(["Hallo Welt", "hello world"], normalize=True)
    similarities = model.score([("a cat sits", "a cat is sitting")])

The names below are imported on first use (PEP 562), so that ``import psp_core.tokenization.tokenizer``
(what the preparation stages' worker processes need) does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psp_core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel, load_model
    from psp_core.inference.quantize import quantization_ranges, quantize_embeddings
    from psp_core.models.bundle import BundleConfig, BundleError
    from psp_core.tokenization.tokenizer import Tokenizer
    from psp_core.training import (
        NonFiniteLossError,
        TrainConfig,
        TrainResult,
        train,
    )
    from psp_core.training.training_file import (
        TrainingFile,
        TrainingFileWriter,
    )

# public name -> the module that defines it
_EXPORTS = {
    "BundleConfig": "psp_core.models.bundle",
    "BundleError": "psp_core.models.bundle",
    "NonFiniteLossError": "psp_core.training",
    "PSPModel": "psp_core.inference.model",
    "Tokenizer": "psp_core.tokenization.tokenizer",
    "TrainConfig": "psp_core.training",
    "TrainResult": "psp_core.training",
    "TrainingFile": "psp_core.training.training_file",
    "TrainingFileWriter": "psp_core.training.training_file",
    "load_model": "psp_core.inference.model",
    "quantization_ranges": "psp_core.inference.quantize",
    "quantize_embeddings": "psp_core.inference.quantize",
    "train": "psp_core.training",
}

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
    "quantization_ranges",
    "quantize_embeddings",
    "train",
]
_exported, __dir__ = lazy_exports(globals(), _EXPORTS)


def __getattr__(name: str):
    if name == "__version__":  # (importlib.metadata is slow to import: read on first use)
        from psp_core.version import __version__

        globals()["__version__"] = __version__
        return __version__
    return _exported(name)
