"""Model bundles: a directory with ``config.json``, ``sentencepiece.model`` and
``embeddings.safetensors`` (float32 ``[vocab_size, dim]`` under the key ``embeddings``).

Nothing is pickled. ``config.json`` records the size and xxh3_128 checksum of the two other files
(``files``); loading verifies them, then checks every file against ``config.json`` (spm sha256,
vocabulary size, table shape and dtype) and refuses NaN or infinite weights, naming the file and
the problem. Bundles saved before checksums were recorded (no ``files``) still load, unverified;
the format version stays 1 because the key is optional both ways (older readers ignore it).
Saving writes a temporary directory and swaps it into place
(:func:`psp_core.files.output_dirs.replace_directory`); every file gets the mode the umask gives a new
file. A save replaces an earlier bundle, never a folder of other files.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import xxhash
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from psp_core.files.output_dirs import directory_written_then_replaced
from psp_core.files.output_files import check_output_directory
from psp_core.models.bundle_config import (
    CHECKSUM,
    CONFIG_FILE,
    EMBEDDINGS_FILE,
    EMBEDDINGS_KEY,
    SPM_FILE,
    BundleConfig,
    BundleError,
)
from psp_core.models.model_card import CARD_FILE, model_card

_READ_BLOCK = 8 << 20
log = logging.getLogger(__name__)


def file_record(path: Path) -> dict[str, Any]:
    """Size and checksum of ``path``, read in blocks (a bundle can be gigabytes)."""
    digest = xxhash.xxh3_128()
    buffer = bytearray(_READ_BLOCK)
    view = memoryview(buffer)
    size = 0
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            size += count
    return {"bytes": size, CHECKSUM: digest.hexdigest()}


def _verify_file(path: Path, recorded: dict[str, Any]) -> None:
    size = path.stat().st_size
    if size != recorded["bytes"]:
        raise BundleError(
            f"{path}: size {size} bytes does not match config.json's {recorded['bytes']}; the "
            "file was truncated or changed after saving"
        )
    actual = file_record(path)[CHECKSUM]
    if actual != recorded[CHECKSUM]:
        raise BundleError(
            f"{path}: {CHECKSUM} checksum {actual[:12]}... does not match config.json's "
            f"{recorded[CHECKSUM][:12]}...; the file is damaged or was changed after saving"
        )


def _read_float32_table(path: Path) -> np.ndarray | None:
    """The float32 matrix ``EMBEDDINGS_KEY`` of a safetensors file (its documented layout: an
    8-byte little-endian header length, a JSON header, the data), read straight into a numpy
    array by file reads, which release the GIL. safetensors' ``load_file`` holds it for the whole
    copy, so a server loading a newly promoted version beside the one it serves would stall
    every request in flight meanwhile. None when the file is anything else (a
    bundle saved otherwise, a damaged header, short data): the caller reads it with safetensors,
    which accepts it or says what is wrong."""
    try:
        with open(path, "rb", buffering=0) as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                return None
            length = int.from_bytes(prefix, "little")
            if length > 100_000_000:
                return None
            entry = json.loads(handle.read(length)).get(EMBEDDINGS_KEY)
            if not isinstance(entry, dict) or entry.get("dtype") != "F32":
                return None
            rows, dim = (int(n) for n in entry["shape"])
            begin, end = (int(n) for n in entry["data_offsets"])
            if rows < 0 or dim < 0 or end - begin != rows * dim * 4:
                return None
            table = np.empty((rows, dim), dtype="<f4")
            view = memoryview(table).cast("B")
            handle.seek(8 + length + begin)
            done = 0
            while done < len(view):
                count = handle.readinto(view[done:])
                if not count:
                    return None
                done += count
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return table


def require_finite(table: np.ndarray, where: str, consequence: str) -> None:
    """Raise :class:`BundleError` when ``table`` holds a NaN or an infinity, naming ``where``,
    how many, the first row and ``consequence``."""
    # min and max are NaN when any value is NaN and infinite when any value is: two vectorized
    # passes without a temporary the size of the table
    if np.isfinite(table.min()) and np.isfinite(table.max()):
        return
    bad = ~np.isfinite(table)
    count = int(bad.sum())
    first_row = int(np.flatnonzero(bad.any(axis=1))[0])
    plural = "s" if count != 1 else ""
    raise BundleError(
        f"{where}: {count} non-finite value{plural} (NaN or Inf) in the embeddings, first in "
        f"row {first_row}; {consequence}"
    )


def is_bundle_directory(directory: str | Path) -> bool:
    """Whether ``directory`` holds a model bundle's ``config.json`` (damaged or not): the marker
    that lets a save replace it."""
    try:
        data = json.loads((Path(directory) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format_version" in data and "spm_sha256" in data


def check_bundle_output(
    directory: str | Path, *, overwrite: bool = False, inputs=(), what: str = "model bundle"
) -> Path:
    """Refuse, before any work, a bundle directory that is a file, an input, or an existing
    folder of other files (unless ``overwrite``): see :func:`psp_core.files.output_files.
    check_output_directory`. Raises :class:`~psp_core.files.output_files.OutputError`."""
    return check_output_directory(
        directory,
        what,
        is_ours=is_bundle_directory,
        ours="a psp model bundle (no config.json)",
        overwrite=overwrite,
        inputs=inputs,
    )


def save_bundle(
    directory: str | Path,
    embeddings: np.ndarray,
    spm_proto: bytes,
    config: BundleConfig,
    card: str | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a bundle atomically (with the size and checksum of each file); returns its path.

    An existing bundle at ``directory`` is replaced (a reader sees the old or the new one,
    whole); an existing folder of other files is refused with
    :class:`~psp_core.files.output_files.OutputError`, unless ``overwrite``.

    ``card`` is its model card (``README.md``); by default one from ``config`` alone
    (:func:`psp_core.models.model_card.model_card`). The card is documentation, outside the checksums:
    the pipeline rewrites it as it learns more (the data funnel, the evaluation)."""
    directory = Path(directory)
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    expected = (config.vocab_size, config.dim)
    if embeddings.shape != expected:
        raise BundleError(f"embeddings have shape {embeddings.shape}, config says {expected}")
    if hashlib.sha256(spm_proto).hexdigest() != config.spm_sha256:
        raise BundleError("config.spm_sha256 does not match the sentencepiece model given")
    config.validate("config")
    require_finite(embeddings, "model to save", "refusing to write a bundle nobody can load")
    check_bundle_output(directory, overwrite=overwrite)
    with directory_written_then_replaced(directory) as tmp:
        (tmp / SPM_FILE).write_bytes(spm_proto)
        try:
            save_file({EMBEDDINGS_KEY: embeddings}, str(tmp / EMBEDDINGS_FILE))
        except SafetensorError as error:
            raise BundleError(f"cannot write {directory / EMBEDDINGS_FILE}: {error}") from error
        data = asdict(config)
        data["files"] = {name: file_record(tmp / name) for name in (SPM_FILE, EMBEDDINGS_FILE)}
        (tmp / CONFIG_FILE).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        (tmp / CARD_FILE).write_text(card or model_card(config), encoding="utf-8")
    return directory


def _hub_hint(directory: str | Path) -> str:
    """For a missing relative ``ORG/NAME`` (how sentence-transformers and model2vec name Hub
    models): how to ask for the Hub instead."""
    path = Path(directory)
    if not path.exists() and not path.is_absolute() and len(path.parts) == 2:
        return f" (a model on the Hugging Face Hub is named hf://{path.as_posix()})"
    return ""


def read_config(directory: str | Path) -> BundleConfig:
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise BundleError(f"model bundle {directory} is not a directory")
    if not path.is_file():
        raise BundleError(f"{path} is missing: not a psp model bundle")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BundleError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a JSON object")
    return BundleConfig.from_dict(data, path)


def verify_bundle(directory: str | Path) -> BundleConfig:
    """Check a bundle as loading it does (what ``psp info`` reports): the recorded sizes and
    checksums, the tokenizer and the table against ``config.json``, finite weights; returns its
    config. Raises :class:`BundleError` naming the file and the problem. The table is read
    once and dropped, so this costs what a load costs."""
    return load_bundle(directory)[0]


def load_bundle(directory: str | Path) -> tuple[BundleConfig, bytes, np.ndarray]:
    """Read and validate a bundle: returns (config, sentencepiece model bytes, embeddings).

    A path through symbolic links (a registry's ``promoted`` link) is resolved once, first: a
    link swapped while the files are read still gives one bundle's files. A Hub id
    (``hf://ORG/NAME``) is fetched first (:mod:`psp_core.models.hub`)."""
    from psp_core.models.hub import model_folder

    given, directory = directory, model_folder(directory).resolve()
    if not directory.is_dir():
        raise BundleError(f"model bundle {directory} is not a directory{_hub_hint(given)}")
    config = read_config(directory)
    for name in (SPM_FILE, EMBEDDINGS_FILE, *config.files):
        if not (directory / name).is_file():
            raise BundleError(f"{directory / name} is missing")
    for name, recorded in config.files.items():
        _verify_file(directory / name, recorded)
    if not config.files:
        log.info(
            "%s records no file checksums (saved by an older psp_core): files not verified; "
            "saving the model again adds them",
            directory / CONFIG_FILE,
        )

    spm_path = directory / SPM_FILE
    spm_proto = spm_path.read_bytes()
    digest = hashlib.sha256(spm_proto).hexdigest()
    if digest != config.spm_sha256:
        raise BundleError(
            f"{spm_path}: sha256 {digest[:12]}... does not match config.json's "
            f"{config.spm_sha256[:12]}...; the tokenizer is not the one the model was trained with"
        )
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(spm_proto)
    except (RuntimeError, OSError) as error:
        raise BundleError(f"{spm_path}: not a sentencepiece model ({error})") from error
    if processor.GetPieceSize() != config.vocab_size:
        raise BundleError(
            f"{spm_path}: {processor.GetPieceSize()} pieces, config.json says vocab_size "
            f"{config.vocab_size}"
        )

    emb_path = directory / EMBEDDINGS_FILE
    embeddings = _read_float32_table(emb_path)
    if embeddings is None:  # not the layout save_bundle writes: safetensors reads it, or says why
        try:
            tensors = load_file(str(emb_path))
        except (SafetensorError, OSError, ValueError) as error:
            raise BundleError(f"{emb_path}: unreadable or truncated ({error})") from error
        if EMBEDDINGS_KEY not in tensors:
            raise BundleError(f"{emb_path}: no tensor named {EMBEDDINGS_KEY!r}")
        embeddings = tensors[EMBEDDINGS_KEY]
    expected = (config.vocab_size, config.dim)
    if embeddings.shape != expected:
        raise BundleError(
            f"{emb_path}: embeddings have shape {embeddings.shape}, expected {expected} "
            f"(vocab_size, dim) from config.json"
        )
    if embeddings.dtype != np.float32:
        raise BundleError(f"{emb_path}: embeddings are {embeddings.dtype}, expected float32")
    require_finite(embeddings, str(emb_path), "the model cannot be used (restore or retrain it)")
    return config, spm_proto, embeddings
