"""Embeddings in fewer bytes for vector databases: ``int8``/``uint8`` (a byte a dimension) and
``binary``/``ubinary`` (a bit a dimension), as sentence-transformers' ``quantize_embeddings``
gives them, with numpy alone (no torch).

* ``int8``/``uint8``: each dimension is cut into 256 equal buckets between its minimum and
  maximum (``ranges``, a ``[2, dim]`` array, or those of ``calibration_embeddings``, or, not
  recommended, of the embeddings themselves); ``int8`` is the bucket minus 128. Compute the
  ranges once from a representative sample and quantize every later batch with them, or two
  batches' codes do not compare.
* ``binary``/``ubinary``: the sign of each dimension, 8 dimensions a byte (``np.packbits``);
  ``binary`` subtracts 128 to fit int8, as sentence-transformers does. Compare by Hamming distance.

How much retrieval each keeps on the dev suite's held-back pairs:
benchmarks/RESULTS.md#quantized-recall.
"""

from __future__ import annotations

import numpy as np

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def quantization_ranges(calibration_embeddings: np.ndarray) -> np.ndarray:
    """The ``[2, dim]`` minimum and maximum of each dimension over ``calibration_embeddings``:
    the ``ranges`` to quantize every later batch with."""
    sample = np.asarray(calibration_embeddings, dtype=np.float32)
    if sample.ndim != 2 or len(sample) < 2:
        raise ValueError(
            "int8 ranges need at least 2 calibration embeddings, as a [n, dim] array "
            f"(got shape {sample.shape})"
        )
    return np.vstack((sample.min(axis=0), sample.max(axis=0)))


def quantize_embeddings(
    embeddings: np.ndarray,
    precision: str,
    ranges: np.ndarray | None = None,
    calibration_embeddings: np.ndarray | None = None,
) -> np.ndarray:
    """``embeddings`` (float, ``[n, dim]`` or ``[dim]``) at ``precision`` (one of
    :data:`PRECISIONS`): the same codes as ``sentence_transformers.quantization.
    quantize_embeddings`` (see the module's text)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    embeddings = np.asarray(embeddings)
    if embeddings.dtype in (np.int8, np.uint8):
        raise ValueError("embeddings to quantize must be float, not int8 or uint8")
    if precision == "float32":
        return embeddings.astype(np.float32, copy=False)
    if precision.endswith("binary"):
        packed = np.packbits(embeddings > 0, axis=-1)
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    if ranges is None:
        if calibration_embeddings is None and (embeddings.ndim == 1 or len(embeddings) < 2):
            raise ValueError(
                f"{precision} needs ranges: pass ranges= (quantization_ranges of a sample) or "
                "calibration_embeddings=; one embedding has none of its own"
            )
        sample = embeddings if calibration_embeddings is None else calibration_embeddings
        ranges = quantization_ranges(sample)
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, embeddings.shape[-1]):
        raise ValueError(f"ranges must have shape (2, {embeddings.shape[-1]}), got {ranges.shape}")
    starts = ranges[0]
    steps = (ranges[1] - starts) / 255
    steps = np.where(steps == 0, 1, steps)
    buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
