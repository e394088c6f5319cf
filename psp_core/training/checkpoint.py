"""Training checkpoints that resume exactly, without pickle.

A checkpoint directory holds::

    LATEST             the name of the newest complete step directory (replaced atomically)
    step-000000001234/ one per save; the newest two are kept (the one before is the fallback
                       when the newest is found damaged), older ones are removed once LATEST
                       points past them
        weights.safetensors     the embedding table
        optimizer.safetensors   optimizer moments and the torch RNG state(s)
        state.json              step, epoch, position in the epoch, the running loss and
                                time of the epoch, history, best score, the optimizer's param
                                groups, the fingerprint of the settings and the training file,
                                the size and xxh3_128 checksum of the two files above and of
                                best.safetensors as last written
    best.safetensors   the table of the best epoch so far (model selection)

Everything a resumed run needs to continue as if never stopped is there: weights, optimizer
state, RNG states, the data position and the step (which fixes the mega-batch size). A
checkpoint is restored only into a run with the same fingerprint, and a write that fails (a full
disk, a quota, a file size limit) leaves no temporary files and raises
:class:`CheckpointWriteError` naming the file. Its files get the umask's modes.

Resuming takes the newest step directory that reads back whole (its ``state.json`` parses, its
safetensors files have the size and checksum it records, and load): a damaged one (a truncated
copy, a disk that lost or changed a write) or a ``LATEST`` that names a missing step is a
warning naming the file, and the step before it is used. When none reads back,
:class:`CheckpointDamagedError` says why for each and how to start afresh; training never
restarts at step 0 on its own while a step is there. A ``best.safetensors`` that no longer
matches its record is found when the bundle is written: :meth:`CheckpointStore.load_best`
raises :class:`CheckpointDamagedError` naming it.
"""

from __future__ import annotations

import errno
import json
import logging
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

from psp_core.files.output_dirs import current_umask, replace_directory, umask_modes
from psp_core.files.output_files import check_output_directory, os_error_code
from psp_core.models.bundle import file_record
from psp_core.models.bundle_config import CHECKSUM
from psp_core.training.config import TrainConfig
from psp_core.training.optim import TrainingOptimizer

STATE_FILE = "state.json"
WEIGHTS_FILE = "weights.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
BEST_FILE = "best.safetensors"
POINTER_FILE = "LATEST"
_STEP_NAME = re.compile(r"step-[0-9]+-epoch-[0-9]+")
#: the fingerprint key of the training file's content (see ``trainer.train``)
DATA_KEY = "data_sha256"
_ADVICE = {
    errno.ENOSPC: "free space there or write checkpoints elsewhere (psp train --checkpoint-dir)",
    errno.EDQUOT: "free space there or write checkpoints elsewhere (psp train --checkpoint-dir)",
    errno.EFBIG: "raise the file size limit (ulimit -f)",
}


log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
    """A checkpoint exists but was written by a run with different settings or data."""


class CheckpointDamagedError(ValueError):
    """Checkpoints exist, but none of them reads back whole: ``detail`` names each one's file
    and reason; the message adds how to start afresh."""

    def __init__(self, detail: str, restart: str = "psp train --no-resume") -> None:
        self.detail = detail
        super().__init__(f"{detail}; start afresh (which removes them): {restart}")


class _DamagedStep(Exception):
    """One step directory that does not read back: ``str()`` names the file and the reason."""


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


def _optimizer_to_tensors(optimizer: TrainingOptimizer) -> tuple[dict, dict]:
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


def _discard(step: Path) -> None:
    """Remove a step directory, renamed first to a temporary name: a kill part way never leaves
    part of a step under a step's name."""
    doomed = step
    if _STEP_NAME.fullmatch(step.name):
        doomed = step.with_name(f"{step.name}.tmp-{os.getpid()}")
        try:
            os.rename(step, doomed)
        except OSError:
            doomed = step
    shutil.rmtree(doomed, ignore_errors=True)


def _read_state(path: Path) -> dict[str, Any]:
    """A step's ``state.json``; :class:`_DamagedStep` naming it when it does not parse or
    lacks a part."""
    try:
        payload = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise _DamagedStep(f"{path} is missing") from None
    except (OSError, ValueError) as error:  # (JSON and UTF-8 errors are ValueErrors)
        raise _DamagedStep(f"{path}: not readable JSON ({error})") from None
    parts = ("state", "optimizer", "fingerprint")
    if not isinstance(payload, dict) or any(not isinstance(payload.get(p), dict) for p in parts):
        raise _DamagedStep(f"{path}: not a checkpoint state (no {', '.join(parts)})")
    if not isinstance(payload["state"].get("step"), int):
        raise _DamagedStep(f"{path}: its state has no step")
    return payload


def _read_tensors(path: Path, shape=None) -> dict[str, torch.Tensor]:
    """A step's safetensors file; :class:`_DamagedStep` naming it when it does not load (a
    truncated file), or when its table is not of ``shape``."""
    try:
        tensors = load_file(str(path))
    except FileNotFoundError:
        raise _DamagedStep(f"{path} is missing") from None
    except (OSError, SafetensorError) as error:
        raise _DamagedStep(f"{path}: not a whole safetensors file ({error})") from None
    if shape is not None:
        table = tensors.get("embeddings")
        if table is None or tuple(table.shape) != tuple(shape):
            found = "no table" if table is None else f"a {tuple(table.shape)} table"
            raise _DamagedStep(f"{path}: {found}, expected {tuple(shape)}")
    return tensors


def _verify_record(path: Path, record: Any) -> None:
    """:class:`_DamagedStep` naming ``path`` when it is not the file ``record`` (its size and
    checksum, from :func:`~psp_core.models.bundle.file_record`) describes."""
    if not isinstance(record, dict) or CHECKSUM not in record or "bytes" not in record:
        raise _DamagedStep(f"{path}: no size and checksum recorded for it")
    try:
        actual = file_record(path)
    except FileNotFoundError:
        raise _DamagedStep(f"{path} is missing") from None
    except OSError as error:
        raise _DamagedStep(f"{path}: cannot be read ({error})") from None
    if actual != {"bytes": record["bytes"], CHECKSUM: record[CHECKSUM]}:
        raise _DamagedStep(
            f"{path}: {actual['bytes']} bytes with {CHECKSUM} {actual[CHECKSUM][:12]}..., but "
            f"{record['bytes']} bytes with {str(record[CHECKSUM])[:12]}... when it was written "
            "(damaged or changed since)"
        )


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
        #: the step directory :meth:`restore` resumed from
        self.resumed_from: Path | None = None
        #: the size and checksum of ``best.safetensors`` as last written (saved or resumed)
        self.best_record: dict[str, Any] | None = None

    @property
    def latest(self) -> Path | None:
        """The step directory ``LATEST`` names when it is there whole (its ``state.json``
        written), or None."""
        named = self._named_step()
        return named if named is not None and (named / STATE_FILE).is_file() else None

    def exists(self) -> bool:
        """Whether there is anything to resume: a step directory, or a ``LATEST`` naming one
        (:meth:`restore` says so when it is missing)."""
        return self._named_step() is not None or bool(self.steps())

    def steps(self) -> list[Path]:
        """The complete step directories, newest first (a step directory gets its name only
        once it is whole; the zero-padded names sort as their step and epoch)."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if _STEP_NAME.fullmatch(p.name)]
        return sorted(found, key=lambda path: path.name, reverse=True)

    def _named_step(self) -> Path | None:
        try:
            name = (self.directory / POINTER_FILE).read_text(errors="replace").strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        return self.directory / name

    def save(
        self,
        weight: torch.Tensor,
        optimizer: TrainingOptimizer,
        state: TrainingState,
        fingerprint: dict[str, Any],
    ) -> None:
        """Write a checkpoint and point ``LATEST`` at it; then remove the step directories
        but this one and the one before it (the last saved or resumed from, so that a damaged
        newer one goes; else the newest older one): that one is the fallback.

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
        payload = {
            "state": asdict(state),
            "optimizer": optim_meta,
            "fingerprint": fingerprint,
            "files": {name: file_record(tmp / name) for name in (WEIGHTS_FILE, OPTIMIZER_FILE)},
            "best": self.best_record,
        }
        with _writing(final / STATE_FILE, tmp):
            (tmp / STATE_FILE).write_text(json.dumps(payload, indent=1))
            umask_modes(tmp)  # (safetensors writes its files 0600)
            replace_directory(tmp, final)
        pointer_tmp = self.directory / f"{POINTER_FILE}.tmp-{os.getpid()}"
        with _writing(self.directory / POINTER_FILE, pointer_tmp):
            pointer_tmp.write_text(name + "\n")
            os.replace(pointer_tmp, self.directory / POINTER_FILE)
        previous, self.resumed_from = self.resumed_from, final
        if previous is None or previous.name >= final.name:  # no earlier save or resume here
            older = [p for p in self.steps() if p.name < final.name]
            previous = older[0] if older else None
        kept = {final.name} | ({previous.name} if previous is not None else set())
        for other in self.directory.glob("step-*"):
            if other.name not in kept:
                _discard(other)

    def restore(
        self,
        weight: torch.Tensor,
        optimizer: TrainingOptimizer,
        fingerprint: dict[str, Any],
    ) -> TrainingState:
        """Load the newest checkpoint that reads back whole into ``weight`` and ``optimizer``;
        returns its state. A damaged step, or a ``LATEST`` naming a missing one, is a warning
        and the step before it is tried.

        Raises:
            CheckpointMismatchError: the checkpoint was written for other settings or data.
            CheckpointDamagedError: none of the checkpoints reads back.
        """
        named, problems = self._named_step(), []
        if named is not None and not named.is_dir():
            problems.append(f"{self.directory / POINTER_FILE} names {named.name}, which is missing")
            log.warning("%s", problems[-1])
        for step in self.steps():
            try:
                state = self._restore_step(step, weight, optimizer, fingerprint)
            except _DamagedStep as damaged:
                problems.append(str(damaged))
                log.warning(
                    "checkpoint %s is damaged (%s); trying the step before it", step, damaged
                )
                continue
            if problems:
                log.warning("resuming from the earlier checkpoint %s", step)
            self.resumed_from = step
            return state
        if not problems:
            raise FileNotFoundError(f"no complete checkpoint in {self.directory}")
        raise CheckpointDamagedError(
            f"no checkpoint in {self.directory} can be resumed ({'; '.join(problems)})"
        )

    def _restore_step(
        self, step: Path, weight: torch.Tensor, optimizer: TrainingOptimizer, fingerprint
    ) -> TrainingState:
        """Load ``step`` into ``weight`` and ``optimizer``; :class:`_DamagedStep` names the file
        that does not read back."""
        payload = _read_state(step / STATE_FILE)
        # a checkpoint of an earlier release lacks the settings added since, at their old value,
        # and may hold settings removed since, at the value that trains as now
        saved = {**TrainConfig.ADDED_LATER, **payload["fingerprint"]}
        for name, value in TrainConfig.REMOVED.items():
            if saved.get(name, value) == value:
                saved.pop(name, None)
        if saved != fingerprint:
            raise CheckpointMismatchError(
                f"cannot resume from checkpoint {step}: {_mismatch(saved, fingerprint)}; "
                f"delete {self.directory} or train without resuming (psp train --no-resume)"
            )
        # (checkpoints of earlier releases have no records: their files are only loaded)
        for name, record in (payload.get("files") or {}).items():
            if name in (WEIGHTS_FILE, OPTIMIZER_FILE):
                _verify_record(step / name, record)
        weights = _read_tensors(step / WEIGHTS_FILE, weight.shape)["embeddings"]
        tensors = _read_tensors(step / OPTIMIZER_FILE)
        try:
            optimizer.load_state_dict(_optimizer_from_tensors(tensors, payload["optimizer"]))
            _restore_rng(tensors)
        except (KeyError, ValueError, RuntimeError, TypeError) as error:
            message = f"{step / OPTIMIZER_FILE}: does not fit the optimizer ({error})"
            raise _DamagedStep(message) from None
        with torch.no_grad():
            weight.copy_(weights.to(weight.device))
        self.best_record = payload.get("best")
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
            os.chmod(tmp, 0o666 & ~current_umask())  # (safetensors writes its files 0600)
            record = file_record(tmp)
            os.replace(tmp, self.directory / BEST_FILE)
        self.best_record = record

    def load_best(self, shape) -> torch.Tensor:
        """The best epoch's table, of ``shape``.

        Raises:
            CheckpointDamagedError: ``best.safetensors`` is missing, does not match the size and
                checksum recorded when it was written, or does not load.
        """
        path = self.directory / BEST_FILE
        try:
            if self.best_record is not None:
                _verify_record(path, self.best_record)
            return _read_tensors(path, shape)["embeddings"]
        except _DamagedStep as damaged:
            raise CheckpointDamagedError(str(damaged)) from None

    def remove(self) -> None:
        """Remove the checkpoint directory, ``LATEST`` first (so that a kill part way leaves
        whole steps to resume, or nothing). One that is a symbolic link keeps the link and its
        target folder, emptied, so that the next run writes through the link again."""
        if self.directory.is_dir():
            (self.directory / POINTER_FILE).unlink(missing_ok=True)
            for step in self.steps():
                _discard(step)
        if not self.directory.is_symlink():
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        for entry in os.scandir(os.path.realpath(self.directory)):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
