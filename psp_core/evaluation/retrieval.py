"""The error rate of a retrieval: what the retrieval suite and the dev suite's held-back pairs
count."""

from __future__ import annotations

import numpy as np


def error_rate(retrieved: np.ndarray) -> float:
    """% of positions ``i`` whose retrieved index is not ``i``."""
    retrieved = np.asarray(retrieved)
    if len(retrieved) == 0:
        raise ValueError("no retrievals to score")
    return 100.0 * float(np.mean(retrieved != np.arange(len(retrieved))))
