"""The torch device a user names (``auto``, ``cpu``, ``cuda``, ``cuda:1``...), checked against
this machine before any work, with one clear error instead of torch's traceback."""

from __future__ import annotations

import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` is ``cuda`` where a CUDA device is present, else ``cpu``; any other name must be
    a device this machine has. Raises ``ValueError`` saying what is wrong and what would work."""
    if isinstance(name, torch.device):
        name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"device {name!r} is not a device name; expected auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device {name!r} requested but CUDA is not available on this machine (no GPU, "
                "or a CPU-only torch); use --device cpu or auto"
            )
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"device {name!r} requested but this machine has {count} CUDA device"
                f"{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r} requested but this machine has no MPS device")
    elif device.type not in ("cpu", "mps"):
        raise ValueError(f"device {name!r}: only cpu, cuda and mps devices are supported")
    return device
