"""The training HDF5 (docs/formats.md): flat CSR arrays of sentencepiece ids.

Layout::

    src_ids     int32[n_src_tokens]   chunked, compressed
    src_offsets int64[n_pairs + 1]    pair i's source is src_ids[src_offsets[i]:src_offsets[i+1]]
    tgt_ids     int32[n_tgt_tokens]
    tgt_offsets int64[n_pairs + 1]
    pair_group  uint16[n_pairs]       only in a file of several languages (kind "mixed"): the
                                      index of each pair's group in the attr ``groups``
    attrs: n_pairs, vocab_size, spm_sha256, lang, kind ("bitext" | "paraphrase" | "mixed"),
           seed, format_version; a mixed file also ``groups`` (JSON list of language codes)
           and ``group_kinds`` (JSON list, each group's kind: its negative-mining rule)

Pairs are stored already shuffled, so training reads contiguous slices and memory does not grow
with the corpus. The writer appends batches and renames a temporary file into place only when it
is closed without error, so a file at the final path is always complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import h5py
import numpy as np

from psp_core.tokenization.csr import TokenBatch

FORMAT_VERSION = 1
KINDS = ("bitext", "paraphrase")
#: the kind of a file whose pairs come from several languages, each pair with its group
MIXED = "mixed"
_SIDES = ("src", "tgt")
_CHUNK_TOKENS = 1 << 18
_CHUNK_OFFSETS = 1 << 15
# the writer's chunk cache per dataset: room for the partly filled last chunk of ids (1 MiB),
# which is all it needs; HDF5 2's default (8 MiB) would keep full chunks that are never read
_WRITE_CACHE_BYTES = 2 * _CHUNK_TOKENS * np.dtype(np.int32).itemsize


class TrainingFileError(ValueError):
    """The file is not a valid P-SP training HDF5."""


@dataclass(frozen=True)
class TrainingFileInfo:
    n_pairs: int
    vocab_size: int
    spm_sha256: str
    lang: str
    kind: str
    seed: int
    format_version: int
    #: a mixed file's language groups and their kinds (empty for one language's file)
    groups: tuple[str, ...] = ()
    group_kinds: tuple[str, ...] = ()
    #: a mixed file's pairs per group, as packed
    group_pairs: tuple[int, ...] = ()
    #: what the writer was told about the data (JSON; the multilingual model: its sampling)
    description: dict | None = None


class TrainingFileWriter:
    """Append encoded pairs to a new training HDF5; use as a context manager.

    Example::

        with TrainingFileWriter(path, vocab_size=50000, spm_sha256=sha, lang="de") as writer:
            writer.append(source_batch, target_batch)
    """

    def __init__(
        self,
        path: str | Path,
        *,
        vocab_size: int,
        spm_sha256: str,
        lang: str,
        kind: str = "bitext",
        seed: int = 0,
        groups: Sequence[str] = (),
        group_kinds: Sequence[str] = (),
        description: dict | None = None,
    ) -> None:
        if groups:
            if len(group_kinds) != len(groups) or any(k not in KINDS for k in group_kinds):
                raise ValueError(f"group_kinds must give one of {KINDS} per group")
            if len(groups) > np.iinfo(np.uint16).max:
                raise ValueError(f"at most {np.iinfo(np.uint16).max} groups")
            kind = MIXED
        elif kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.groups = tuple(groups)
        self.path = Path(path)
        self._tmp = self.path.with_name(self.path.name + f".tmp-{os.getpid()}")
        self._attrs = dict(
            vocab_size=int(vocab_size),
            spm_sha256=str(spm_sha256),
            lang=str(lang),
            kind=kind,
            seed=int(seed),
            format_version=FORMAT_VERSION,
        )
        if groups:
            self._attrs["groups"] = json.dumps(list(groups))
            self._attrs["group_kinds"] = json.dumps(list(group_kinds))
        if description is not None:
            self._attrs["description"] = json.dumps(description, sort_keys=True)
        self._group_pairs = np.zeros(len(groups), dtype=np.int64)
        self._file: h5py.File | None = None
        # (ids, offsets) per side, open for the file's life: see append()
        self._datasets: dict[str, tuple[h5py.Dataset, h5py.Dataset]] = {}
        self.n_pairs = 0

    def __enter__(self) -> TrainingFileWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = h5py.File(self._tmp, "w", rdcc_nbytes=_WRITE_CACHE_BYTES)
        for side in _SIDES:
            ids = self._file.create_dataset(
                f"{side}_ids",
                shape=(0,),
                maxshape=(None,),
                dtype=np.int32,
                chunks=(_CHUNK_TOKENS,),
                compression="gzip",
                compression_opts=1,
                shuffle=True,
            )
            offsets = self._file.create_dataset(
                f"{side}_offsets",
                shape=(1,),
                maxshape=(None,),
                dtype=np.int64,
                chunks=(_CHUNK_OFFSETS,),
                compression="gzip",
                compression_opts=1,
                shuffle=True,
            )
            offsets[0] = 0
            self._datasets[side] = (ids, offsets)
        if self.groups:
            self._group = self._file.create_dataset(
                "pair_group",
                shape=(0,),
                maxshape=(None,),
                dtype=np.uint16,
                chunks=(_CHUNK_OFFSETS,),
                compression="gzip",
                compression_opts=1,
            )
        return self

    def append(
        self, source: TokenBatch, target: TokenBatch, group: np.ndarray | None = None
    ) -> None:
        """Append ``len(source)`` pairs (``source[i]`` is aligned with ``target[i]``); a mixed
        file (``groups`` given) needs each pair's ``group`` index too.

        The datasets stay open between appends: HDF5 keeps the partly filled last chunk in
        the dataset's chunk cache, whereas reopening them (``file[name]`` each time) would
        flush it at every append, to be compressed, read back, decompressed and compressed
        again.
        """
        if self._file is None:
            raise RuntimeError("TrainingFileWriter.append called outside its `with` block")
        if len(source) != len(target):
            raise ValueError(f"{len(source)} source sentences but {len(target)} target sentences")
        if bool(self.groups) != (group is not None):
            raise ValueError("pass each pair's group exactly when the file has groups")
        if group is not None:
            group = np.asarray(group)
            if len(group) != len(source) or (
                len(group) and (group.min() < 0 or group.max() >= len(self.groups))
            ):
                raise ValueError(f"group indices must be one per pair, in [0, {len(self.groups)})")
        vocab = self._attrs["vocab_size"]
        for side, batch in zip(_SIDES, (source, target), strict=True):
            if len(batch.ids) and (batch.ids.min() < 0 or batch.ids.max() >= vocab):
                raise ValueError(f"{side} ids outside [0, {vocab}): the vocabulary does not match")
            ids_ds, off_ds = self._datasets[side]
            base_tokens = ids_ds.shape[0]
            ids_ds.resize((base_tokens + len(batch.ids),))
            ids_ds[base_tokens:] = batch.ids.astype(np.int32, copy=False)
            base_pairs = off_ds.shape[0]
            off_ds.resize((base_pairs + len(batch),))
            off_ds[base_pairs:] = batch.offsets[1:] + base_tokens
        if group is not None:
            self._group.resize((self.n_pairs + len(group),))
            self._group[self.n_pairs :] = group.astype(np.uint16)
            self._group_pairs += np.bincount(group, minlength=len(self.groups))
        self.n_pairs += len(source)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._file is not None
        try:
            if exc_type is None:
                self._file.attrs.update(self._attrs)
                self._file.attrs["n_pairs"] = self.n_pairs
                if self.groups:
                    self._file.attrs["group_pairs"] = json.dumps(self._group_pairs.tolist())
        finally:
            self._datasets = {}
            self._file.close()
            self._file = None
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)


class TrainingFile:
    """Read a training HDF5 in contiguous slices of pairs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"training file {self.path} does not exist")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as error:
            raise TrainingFileError(f"{self.path}: not a readable HDF5 file ({error})") from error
        self.info = self._validate()

    def _validate(self) -> TrainingFileInfo:
        missing = [
            name
            for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")
            if name not in self._file
        ]
        if missing:
            raise TrainingFileError(f"{self.path}: missing datasets {missing}")
        attrs = self._file.attrs
        absent = [
            key
            for key in ("n_pairs", "vocab_size", "spm_sha256", "lang", "format_version")
            if key not in attrs
        ]
        if absent:
            raise TrainingFileError(f"{self.path}: missing attributes {absent}")
        version = int(attrs["format_version"])
        if version != FORMAT_VERSION:
            raise TrainingFileError(
                f"{self.path}: format_version {version}, this psp_core reads {FORMAT_VERSION}"
            )
        n_pairs = int(attrs["n_pairs"])
        for side in _SIDES:
            offsets = self._file[f"{side}_offsets"]
            if offsets.shape[0] != n_pairs + 1:
                raise TrainingFileError(
                    f"{self.path}: {side}_offsets has {offsets.shape[0]} entries, "
                    f"expected n_pairs + 1 = {n_pairs + 1}"
                )
            if n_pairs and int(offsets[-1]) != self._file[f"{side}_ids"].shape[0]:
                raise TrainingFileError(
                    f"{self.path}: {side}_offsets ends at {int(offsets[-1])} but {side}_ids has "
                    f"{self._file[f'{side}_ids'].shape[0]} tokens (truncated file?)"
                )
        kind = str(attrs.get("kind", "bitext"))
        groups: tuple[str, ...] = ()
        group_kinds: tuple[str, ...] = ()
        group_pairs: tuple[int, ...] = ()
        if kind == MIXED:
            if "pair_group" not in self._file or "groups" not in attrs:
                raise TrainingFileError(f"{self.path}: a mixed file without pair_group/groups")
            groups = tuple(json.loads(attrs["groups"]))
            group_kinds = tuple(json.loads(attrs["group_kinds"]))
            group_pairs = tuple(json.loads(attrs.get("group_pairs", "[]")))
            if self._file["pair_group"].shape[0] != n_pairs or len(group_kinds) != len(groups):
                raise TrainingFileError(
                    f"{self.path}: pair_group has {self._file['pair_group'].shape[0]} entries "
                    f"for {n_pairs} pairs, or group_kinds does not match groups"
                )
        return TrainingFileInfo(
            n_pairs=n_pairs,
            vocab_size=int(attrs["vocab_size"]),
            spm_sha256=str(attrs["spm_sha256"]),
            lang=str(attrs["lang"]),
            kind=kind,
            seed=int(attrs.get("seed", 0)),
            format_version=version,
            groups=groups,
            group_kinds=group_kinds,
            group_pairs=group_pairs,
            description=json.loads(attrs["description"]) if "description" in attrs else None,
        )

    def __len__(self) -> int:
        return self.info.n_pairs

    def _read_side(self, side: str, start: int, stop: int) -> TokenBatch:
        offsets = self._file[f"{side}_offsets"][start : stop + 1]
        ids = self._file[f"{side}_ids"][offsets[0] : offsets[-1]].astype(np.int64)
        offsets = offsets - offsets[0]
        if np.any(np.diff(offsets) < 0):
            raise TrainingFileError(f"{self.path}: {side}_offsets decrease in [{start}, {stop})")
        return TokenBatch(ids, offsets)

    def read(self, start: int, stop: int) -> tuple[TokenBatch, TokenBatch]:
        """Pairs ``start..stop-1`` as (source, target) token batches."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"pair range [{start}, {stop}) outside [0, {len(self)})")
        return self._read_side("src", start, stop), self._read_side("tgt", start, stop)

    def read_groups(self, start: int, stop: int) -> np.ndarray | None:
        """The group index of pairs ``start..stop-1`` (int64); None for a one-language file."""
        if not self.info.groups:
            return None
        group = self._file["pair_group"][start:stop].astype(np.int64)
        if len(group) and group.max() >= len(self.info.groups):
            raise TrainingFileError(f"{self.path}: pair_group outside groups in [{start}, {stop})")
        return group

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrainingFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
