"""The torch device a user names (``auto``, ``cpu``, ``cuda``, ``cuda:1``...), checked against
this machine before any work, with one clear error instead of torch's traceback.

Inference on the CPU needs no torch (:mod:`psp_core.inference.fast.pooling`): :func:`inference_device`
answers ``cpu`` and ``auto`` without importing it where it is not installed."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from psp_core.extras import MissingExtra, torch_module

if TYPE_CHECKING:
    import torch


#: what a Linux machine that can run CUDA has: the NVIDIA driver's control node and its /proc
#: entry, or WSL2's GPU device
CUDA_DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def cuda_driver_absent() -> bool:
    """Whether this machine certainly has no CUDA device, known without importing torch (whose
    import costs more than embedding a line): a Linux machine without the driver's files.
    Elsewhere torch is asked."""
    return sys.platform == "linux" and not any(os.path.exists(p) for p in CUDA_DRIVER_PATHS)


def inference_device(name: str | torch.device) -> str:
    """The device ``embed`` runs on, as a name (``cpu``, ``cuda:0``...): ``cpu`` without
    importing torch, ``auto`` the CPU where torch is not installed or no CUDA driver is
    present, any other name checked by :func:`resolve_device` (which needs torch: without it,
    a :class:`MissingExtra`)."""
    name = str(name)
    if name == "cpu" or (name == "auto" and (cuda_driver_absent() or torch_module() is None)):
        return "cpu"
    if torch_module() is None:
        raise MissingExtra(f"device {name!r}", "train")
    return str(resolve_device(name))


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` is ``cuda`` where a CUDA device is present, else ``cpu``; any other name must be
    a device this machine has. Raises ``ValueError`` saying what is wrong and what would work."""
    import torch

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
