"""Training checkpoints that resume exactly, without pickle.

A checkpoint directory holds::

    LATEST             the name of the newest complete step directory (replaced atomically)
    step-000000001234/ one per save; older ones are removed once LATEST points past them
        weights.safetensors     the embedding table
        optimizer.safetensors   optimizer moments and the torch RNG state(s)
        state.json              step, epoch, position in the epoch, the running loss and
                                time of the epoch, history, best score, the optimizer's param
                                groups, the fingerprint of the settings and the training file
    best.safetensors   the table of the best epoch so far (model selection)

Everything a resumed run needs to continue as if never stopped is there: weights, optimizer
state, RNG states, the data position and the step (which fixes the mega-batch size). A
checkpoint is restored only into a run with the same fingerprint, and a write that fails (a full
disk, a quota, a file size limit) leaves no temporary files and raises
:class:`CheckpointWriteError` naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from psp_core.files.output_dirs import replace_directory
from psp_core.files.output_files import check_output_directory, os_error_code
from psp_core.training.config import TrainConfig

STATE_FILE = "state.json"
WEIGHTS_FILE = "weights.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
BEST_FILE = "best.safetensors"
POINTER_FILE = "LATEST"
#: the fingerprint key of the training file's content (see ``trainer.train``)
DATA_KEY = "data_sha256"
_ADVICE = {
    errno.ENOSPC: "free space there or write checkpoints elsewhere (psp train --checkpoint-dir)",
    errno.EDQUOT: "free space there or write checkpoints elsewhere (psp train --checkpoint-dir)",
    errno.EFBIG: "raise the file size limit (ulimit -f)",
}


class CheckpointMismatchError(ValueError):
    """A checkpoint exists but was written by a run with different settings or data."""


class CheckpointWriteError(OSError):
    """A checkpoint file could not be written (a full disk, a quota, a file size limit...).

    ``errno`` and ``filename`` are set like an ``OSError``'s where the cause is known.
    """

    def __init__(self, path: Path, error: BaseException) -> None:
        code = os_error_code(error)
        reason = os.strerror(code) if code is not None else str(error)
        super().__init__(code, reason, str(path))
        self.message = f"cannot write checkpoint file {path}: {reason}"
        if code in _ADVICE:
            self.message += f"; {_ADVICE[code]}"

    def __str__(self) -> str:
        return self.message


@dataclass
class TrainingState:
    step: int = 0
    epoch: int = 0
    position: int = 0
    best_score: float | None = None
    best_epoch: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    # the epoch so far (at ``position``): the sum and number of its mini-batch losses and its
    # training seconds, so that a resumed epoch's record covers all of it
    epoch_loss_sum: float = 0.0
    epoch_loss_count: int = 0
    epoch_seconds: float = 0.0


def _optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    state_dict = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {"param_groups": state_dict["param_groups"], "state": {}}
    for param_id, param_state in state_dict["state"].items():
        plain = {}
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{param_id}.{key}"] = value.detach().cpu().contiguous()
            else:
                plain[key] = value
        meta["state"][str(param_id)] = plain
    return tensors, meta


def _optimizer_from_tensors(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict[str, Any]] = {
        int(param_id): dict(plain) for param_id, plain in meta["state"].items()
    }
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, param_id, key = name.split(".", 2)
            state.setdefault(int(param_id), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def _rng_tensors() -> dict[str, torch.Tensor]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{index}"] = cuda_state
    return tensors


@contextmanager
def _writing(path: Path, temporary: Path) -> Iterator[None]:
    """Remove ``temporary`` if the block fails; an OS error writing ``path`` becomes a
    :class:`CheckpointWriteError` (safetensors reports it as a ``SafetensorError``)."""
    try:
        yield
    except BaseException as error:
        if temporary.is_dir():
            shutil.rmtree(temporary, ignore_errors=True)
        else:
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError | SafetensorError):
            raise CheckpointWriteError(path, error) from error
        raise


def _mismatch(saved: dict[str, Any], current: dict[str, Any]) -> str:
    """What differs between a checkpoint's fingerprint and this run's, in words."""
    parts = []
    if DATA_KEY not in saved:
        parts.append("it does not record which training file it was written for (older psp_core)")
    elif saved[DATA_KEY] != current.get(DATA_KEY):
        parts.append(
            f"it was written for another training file (content sha256 {saved[DATA_KEY][:12]}..., "
            f"this one has {str(current.get(DATA_KEY))[:12]}...)"
        )
    settings = sorted(
        key
        for key in set(saved) | set(current)
        if key != DATA_KEY and saved.get(key) != current.get(key)
    )
    if settings:
        changes = ", ".join(f"{key} {saved.get(key)!r} -> {current.get(key)!r}" for key in settings)
        parts.append(f"it was written with different settings ({changes})")
    return "; ".join(parts)


def _restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda_states = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states)


def is_checkpoint_directory(directory: str | Path) -> bool:
    """Whether everything in ``directory`` is a checkpoint store's own (``step-*``, ``LATEST``,
    ``best.safetensors`` and their temporaries): the marker that lets training write there and
    remove it when done."""
    own = re.compile(rf"(step-[0-9]+-epoch-[0-9]+|{POINTER_FILE}|{re.escape(BEST_FILE)})")
    return all(
        own.fullmatch(name.split(".tmp-")[0].split(".old-")[0]) for name in os.listdir(directory)
    )


def check_checkpoint_directory(
    directory: str | Path, *, overwrite: bool = False, inputs=()
) -> Path:
    """Refuse, before any work, a checkpoint directory that is a file, an input, or an existing
    folder of other files (training removes its checkpoint directory when it ends)."""
    return check_output_directory(
        directory,
        "checkpoint directory",
        is_ours=is_checkpoint_directory,
        ours="a psp training checkpoint",
        overwrite=overwrite,
        inputs=inputs,
    )


class CheckpointStore:
    """Save and restore training checkpoints in ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @property
    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.directory / POINTER_FILE
        if not pointer.is_file():
            return None
        path = self.directory / pointer.read_text().strip()
        return path if (path / STATE_FILE).is_file() else None

    def exists(self) -> bool:
        return self.latest is not None

    def save(
        self,
        weight: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        state: TrainingState,
        fingerprint: dict[str, Any],
    ) -> None:
        """Write a checkpoint and point ``LATEST`` at it; the previous one is removed after.

        Raises:
            CheckpointWriteError: a file could not be written; the temporary files are removed
                and the previous checkpoint, if any, is still the latest.
        """
        name = f"step-{state.step:012d}-epoch-{state.epoch:04d}"
        final = self.directory / name  # errors name the files as they would be called there
        tmp = self.directory / f"{name}.tmp-{os.getpid()}"
        with _writing(final, tmp):
            self.directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        with _writing(final / WEIGHTS_FILE, tmp):
            save_file({"embeddings": weight.detach().cpu().contiguous()}, str(tmp / WEIGHTS_FILE))
        optim_tensors, optim_meta = _optimizer_to_tensors(optimizer)
        with _writing(final / OPTIMIZER_FILE, tmp):
            save_file({**optim_tensors, **_rng_tensors()}, str(tmp / OPTIMIZER_FILE))
        payload = {"state": asdict(state), "optimizer": optim_meta, "fingerprint": fingerprint}
        with _writing(final / STATE_FILE, tmp):
            (tmp / STATE_FILE).write_text(json.dumps(payload, indent=1))
            replace_directory(tmp, final)
        pointer_tmp = self.directory / f"{POINTER_FILE}.tmp-{os.getpid()}"
        with _writing(self.directory / POINTER_FILE, pointer_tmp):
            pointer_tmp.write_text(name + "\n")
            os.replace(pointer_tmp, self.directory / POINTER_FILE)
        for other in self.directory.glob("step-*"):
            if other.name != name:
                shutil.rmtree(other, ignore_errors=True)

    def restore(
        self,
        weight: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        fingerprint: dict[str, Any],
    ) -> TrainingState:
        """Load the latest checkpoint into ``weight`` and ``optimizer``; returns the state."""
        latest = self.latest
        if latest is None:
            raise FileNotFoundError(f"no complete checkpoint in {self.directory}")
        payload = json.loads((latest / STATE_FILE).read_text())
        # a checkpoint of an earlier release lacks the settings added since, at their old value,
        # and may hold settings removed since, at the value that trains as now
        saved = {**TrainConfig.ADDED_LATER, **payload["fingerprint"]}
        for name, value in TrainConfig.REMOVED.items():
            if saved.get(name, value) == value:
                saved.pop(name, None)
        if saved != fingerprint:
            raise CheckpointMismatchError(
                f"cannot resume from checkpoint {latest}: {_mismatch(saved, fingerprint)}; "
                f"delete {self.directory} or train without resuming (psp train --no-resume)"
            )
        weights = load_file(str(latest / WEIGHTS_FILE))["embeddings"]
        with torch.no_grad():
            weight.copy_(weights.to(weight.device))
        tensors = load_file(str(latest / OPTIMIZER_FILE))
        optimizer.load_state_dict(_optimizer_from_tensors(tensors, payload["optimizer"]))
        _restore_rng(tensors)
        known = {f.name for f in fields(TrainingState)}
        return TrainingState(**{k: v for k, v in payload["state"].items() if k in known})

    def save_best(self, weight: torch.Tensor, epoch: int, score: float) -> None:
        tmp = self.directory / f"{BEST_FILE}.tmp-{os.getpid()}"
        with _writing(self.directory / BEST_FILE, tmp):
            self.directory.mkdir(parents=True, exist_ok=True)
            save_file(
                {"embeddings": weight.detach().cpu().contiguous()},
                str(tmp),
                metadata={"epoch": str(epoch), "score": repr(score)},
            )
            os.replace(tmp, self.directory / BEST_FILE)

    def load_best(self) -> torch.Tensor:
        return load_file(str(self.directory / BEST_FILE))["embeddings"]

    def remove(self) -> None:
        """Remove the checkpoint directory. One that is a symbolic link keeps the link and its
        target folder, emptied, so that the next run writes through the link again."""
        if not self.directory.is_symlink():
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for entry in os.scandir(os.path.realpath(self.directory)):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
