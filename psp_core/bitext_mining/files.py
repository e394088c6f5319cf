"""Mine translation pairs between two monolingual text files (one sentence per line).

Each file is embedded chunk by chunk into a float32 ``.npy`` memory map in a temporary work
directory beside the output, so memory does not grow with the files; the search itself is
blocked (:mod:`psp_core.bitext_mining.search`). Sentences are read back for the output by their
byte offsets, so no list of all lines is kept either. The output is written under a temporary
name and renamed when complete (a device, a FIFO or standard output, ``-``, is written into;
a link's target is replaced: :func:`psp_core.files.output_targets.resolve_output`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from psp_core.bitext_mining.margin import mine
from psp_core.bitext_mining.search import DEFAULT_BLOCK_SIZE
from psp_core.files.output_dirs import work_directory_beside
from psp_core.files.output_files import NpyWriter, replaced_when_done, write_error
from psp_core.files.output_targets import OutputTarget, resolve_output
from psp_core.inference.model import EmptySentenceWarning, PSPModel, collecting_empty_sentences

log = logging.getLogger(__name__)

EMBED_CHUNK_LINES = 100_000


@dataclass(frozen=True)
class MiningReport:
    """What :func:`mine_files` did."""

    source_sentences: int
    target_sentences: int
    pairs_written: int
    output: Path


class LineFile:
    """A UTF-8 text file indexed by line start offsets (one int64 per line)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"sentence file {self.path} does not exist or is not a file")
        offsets = [0]
        with open(self.path, "rb") as handle:
            for raw in handle:
                offsets.append(offsets[-1] + len(raw))
        self.offsets = np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def _decode(raw: bytes, path: Path, number: int) -> str:
        try:
            return raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}:{number}: not valid UTF-8 ({error.reason})") from error

    def __iter__(self) -> Iterator[str]:
        with open(self.path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                yield self._decode(raw, self.path, number)

    def lines_at(self, indices: np.ndarray) -> list[str]:
        """The lines with the given 0-based indices, in that order."""
        result = []
        with open(self.path, "rb") as handle:
            for index in indices:
                handle.seek(int(self.offsets[index]))
                result.append(self._decode(handle.readline(), self.path, int(index) + 1))
        return result


def embed_to_memmap(model: PSPModel, lines: LineFile, path: Path, batch_size: int) -> np.ndarray:
    """Embed every line of ``lines`` into a float32 ``[n, dim]`` ``.npy`` file at ``path`` and
    return it memory-mapped read-only.

    The file is written with plain writes after reserving its size (a memory map written on a
    full disk dies of SIGBUS); a full disk is an :class:`~psp_core.files.output_files.OutputError`.
    """
    empty: list[np.ndarray] = []  # the lines with nothing to embed, by their index in the file
    try:
        with open(path, "wb") as handle:
            writer = NpyWriter(handle, (len(lines), model.dim))
            iterator, start = iter(lines), 0
            while chunk := list(islice(iterator, EMBED_CHUNK_LINES)):
                found: list[EmptySentenceWarning] = []
                with collecting_empty_sentences(found):
                    vectors = model.embed(chunk, batch_size=batch_size, normalize=True)
                writer.write(vectors)
                empty += [warning.indices + start for warning in found]
                start += len(chunk)
            writer.close()
    except OSError as error:
        raise write_error(path, error) from error
    if empty:  # one warning for the file
        indices = np.concatenate(empty)
        message = (
            f"{len(indices)} of {len(lines)} lines of {lines.path} have nothing to embed "
            f"(first: line {indices[0] + 1}): their vectors are zero, not unit length"
        )
        warnings.warn(EmptySentenceWarning(message, indices, str(lines.path)), stacklevel=2)
    return np.load(path, mmap_mode="r")


def _clean(text: str) -> str:
    return text.replace("\t", " ")


def mine_files(
    model: PSPModel,
    source_file: str | Path,
    target_file: str | Path,
    output_file: str | Path | OutputTarget,
    *,
    k: int = 4,
    mode: str = "intersection",
    threshold: float | None = None,
    batch_size: int = 64,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str = "auto",
) -> MiningReport:
    """Write ``score<TAB>source sentence<TAB>target sentence`` lines, best score first.

    See :func:`psp_core.bitext_mining.mine` for ``k``, ``mode``, ``threshold`` and the search
    options. A tab inside a sentence is written as a space so the output stays three columns.
    """
    source, target = LineFile(source_file), LineFile(target_file)
    output = resolve_output(output_file)
    log.info("embedding %d source and %d target sentences", len(source), len(target))
    # named like every temporary of this output (NAME.tmp-<pid>, beside its target): a later run
    # removes it if this one is killed
    with work_directory_beside(output) as work:
        source_vectors = embed_to_memmap(model, source, Path(work) / "source.npy", batch_size)
        target_vectors = embed_to_memmap(model, target, Path(work) / "target.npy", batch_size)
        pairs = mine(
            source_vectors,
            target_vectors,
            k=k,
            mode=mode,
            threshold=threshold,
            block_size=block_size,
            backend=backend,
        )
        del source_vectors, target_vectors
    with replaced_when_done(output, "w") as handle:
        for start in range(0, len(pairs), EMBED_CHUNK_LINES):
            stop = start + EMBED_CHUNK_LINES
            src = source.lines_at(pairs.source_indices[start:stop])
            tgt = target.lines_at(pairs.target_indices[start:stop])
            handle.writelines(
                f"{score:.6f}\t{_clean(a)}\t{_clean(b)}\n"
                for score, a, b in zip(pairs.scores[start:stop], src, tgt, strict=True)
            )
    log.info("wrote %d pairs to %s", len(pairs), output)
    return MiningReport(len(source), len(target), len(pairs), Path(output))
