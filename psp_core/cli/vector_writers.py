"""Where ``psp embed`` writes its vectors: a ``.npy`` array or a Parquet file with an id column
beside each vector, written behind the embedding on a thread of its own.

Both formats stream: the ``.npy`` header needs the row count first, which ``psp embed`` has
counted before it writes, and a Parquet file is written front to back (row groups, then the
footer), so either goes into a device, a FIFO or standard output as into a file; only a file
gets its space reserved up front (and ``.npy`` rows written past the page cache)."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from psp_core.cli.corpus_files import CorpusError
from psp_core.cli.errors import CliError
from psp_core.files.direct_writes import DirectNpyWriter
from psp_core.files.output_files import NpyWriter, reserve_space
from psp_core.files.output_targets import OutputTarget

#: the Parquet output's id column when no id field is named: the vector's 0-based position
ROW_COLUMN = "row"
VECTOR_COLUMN = "embedding"


OUTPUT_FORMATS = ("npy", "parquet")
_SUFFIXES = {"": "npy", ".npy": "npy", ".parquet": "parquet", ".pq": "parquet"}


class OutputFormatError(CliError):
    """An output name whose suffix names a format ``psp embed`` does not write."""


def output_format(path: str | Path, asked: str | None = None) -> str:
    """``npy`` or ``parquet``: ``asked`` (``--output-format``), else the name's suffix (none:
    ``npy``, as for standard output or a FIFO). Any other suffix is refused, so that a file named
    ``.csv`` never holds ``.npy`` bytes.

    Raises:
        OutputFormatError: a suffix psp does not write, and no ``asked``.
    """
    if asked is not None:
        return asked
    suffix = Path(str(path)).suffix.lower()
    if suffix not in _SUFFIXES:
        raise OutputFormatError(
            f"--output-file {path} ends in {suffix}, a format psp embed does not write: name "
            "it .npy (float32 [n, dim]) or .parquet (ids and vectors), or give --output-format "
            "npy|parquet to write that format under this name"
        )
    return _SUFFIXES[suffix]


def is_parquet_output(path: str | Path, asked: str | None = None) -> bool:
    return output_format(path, asked) == "parquet"


def open_vector_writer(
    handle: IO[bytes],
    output: OutputTarget,
    count: int,
    dim: int,
    id_field: str | None,
    asked_format: str | None = None,
) -> NpyWriter | ParquetVectorWriter:
    """The writer of ``count`` vectors of ``dim`` for ``output`` (Parquet by the suffix of the
    name given, else ``.npy``) on ``handle``. Into a file, space is reserved first, so a full
    disk fails here, and ``.npy`` rows are written past the page cache where they can; into a
    stream (``output.streamed``) every byte is appended in order."""
    if is_parquet_output(output, asked_format):
        return ParquetVectorWriter(handle, count, dim, id_field, reserve=not output.streamed)
    if output.streamed:
        return NpyWriter(handle, (count, dim), reserve=False)
    return DirectNpyWriter(handle, (count, dim))


class IdTypeError(CorpusError):
    """An id that does not convert to the type of the ids before it. ``vector`` is its position
    among the vectors, which the caller turns into the line or row of the corpus."""

    def __init__(self, vector: int, detail: str) -> None:
        super().__init__(f"vector {vector}: {detail}")
        self.vector, self.detail = vector, detail


class WriteBehind:
    """Write each chunk on a thread while the caller computes the next one (writing the vectors
    is a large share of ``psp embed``, spent mostly in the kernel, which runs without the GIL;
    benchmarks/RESULTS.md#embed-cli). At most one write is in flight: a caller that alternates
    two buffers never writes into one being written. Errors of a write come out of the next
    call."""

    def __init__(self, writer) -> None:
        self.writer = writer
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="psp-write")
        self._pending: Future | None = None

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            self._wait()  # nothing may write into the file once it is closed or removed
        except Exception:
            if error is None:
                raise
        finally:
            self._thread.shutdown(wait=True)

    def write(self, vectors: np.ndarray, ids=None) -> None:
        self._wait()
        self._pending = self._thread.submit(self.writer.write, vectors, ids)

    def close(self) -> None:
        self._wait()
        self.writer.close()

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


class ParquetVectorWriter:
    """Write ``count`` vectors as a Parquet file: an id column (the input's id field, or the
    vector's 0-based ``row``) beside ``embedding``, a fixed-size list of ``dim`` float32.

    With ``reserve`` (a file), space for the vectors is reserved first (a full disk fails
    before any embedding) and given back when the file is closed; without it (a stream) the
    handle is only appended to. Ids keep the type of the first batch's ids; one that does not
    convert to it is an :class:`IdTypeError` naming its vector."""

    def __init__(
        self, handle: IO[bytes], count: int, dim: int, id_column: str | None, *, reserve=True
    ) -> None:
        self.handle, self.count, self.dim = handle, count, dim
        self.id_column = id_column or ROW_COLUMN
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._id_type: pa.DataType = pa.int64()
        self.reserved = reserve and reserve_space(handle, count * dim * 4)
        if count == 0:
            self._open()

    def __enter__(self) -> ParquetVectorWriter:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is not None and self._writer is not None and self._writer.is_open:
            self._writer.close()  # while the file is open: the file is thrown away anyway

    def write(self, vectors: np.ndarray, ids: list | pa.Array | None = None) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {vectors.shape}, expected [*, {self.dim}]")
        id_array = self._ids(ids, len(vectors))
        if self._writer is None:
            self._id_type = id_array.type
            self._open()
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        table = pa.Table.from_arrays(
            [id_array, pa.FixedSizeListArray.from_arrays(flat, self.dim)],
            schema=self._schema(),
        )
        self._writer.write_table(table)
        self.rows += len(vectors)

    def close(self) -> None:
        if self.rows != self.count:
            raise ValueError(f"{self.rows} rows written, {self.count} announced")
        self._writer.close()
        if self.reserved:
            self.handle.truncate(self.handle.tell())  # the reserved space the file did not use

    def _ids(self, ids: list | pa.Array | None, n: int) -> pa.Array:
        if ids is None:
            return pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64))
        if len(ids) != n:
            raise ValueError(f"{len(ids)} ids for {n} vectors")
        column_type = self._id_type if self._writer is not None else None
        try:
            array = ids if isinstance(ids, pa.Array) else pa.array(ids)
            if column_type is not None and array.type != column_type:
                array = array.cast(column_type)
        except OverflowError as error:  # an integer id beyond 64 bits
            index = next((i for i, v in enumerate(ids) if _beyond_64_bits(v)), 0)
            raise IdTypeError(
                self.rows + index,
                f'id field "{self.id_column}" is {_described(ids[index])}, an integer beyond '
                "64 bits, which Parquet cannot hold as a number; write it as a string in the "
                'JSON ("12345...") to keep it as text',
            ) from error
        except pa.ArrowException as error:  # a value or a type that does not convert
            index, column_type = _first_misfit(ids, column_type)
            before = f", where the ids before it are {column_type}" if column_type else ""
            raise IdTypeError(
                self.rows + index,
                f'id field "{self.id_column}" is {_described(ids[index])}{before}; an id '
                "field's values must all convert to one type",
            ) from error
        if pa.types.is_null(array.type):
            array = array.cast(pa.string())
        return array

    def _schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field(self.id_column, self._id_type),
                pa.field(VECTOR_COLUMN, pa.list_(pa.float32(), self.dim), nullable=False),
            ]
        )

    def _open(self) -> None:
        # floats do not compress; ids and the row index do
        self._writer = pq.ParquetWriter(
            self.handle,
            self._schema(),
            compression={self.id_column: "zstd", f"{VECTOR_COLUMN}.list.element": "none"},
            use_dictionary=[self.id_column],
            write_statistics=[self.id_column],
        )


def _first_misfit(
    ids: list | pa.Array, column_type: pa.DataType | None
) -> tuple[int, pa.DataType | None]:
    """Where a batch of ids that Arrow refused goes wrong: the first id that, alone, does not
    convert to ``column_type`` (the type of the ids written so far; when none were, the type of
    the batch's first id), and that type. Only runs once a batch failed, so its cost is that of
    an error message."""
    values = ids.to_pylist() if isinstance(ids, pa.Array) else ids
    for index, value in enumerate(values):
        if value is None:
            continue
        try:
            own = pa.array([value])
            if column_type is None:
                column_type = own.type
            elif own.type != column_type:
                own.cast(column_type)
        except pa.ArrowException:
            return index, column_type
    # every id converts alone (ints and strings of digits): the first of another type
    for index, value in enumerate(values):
        if value is not None and pa.array([value]).type != column_type:
            return index, column_type
    return 0, column_type


def _beyond_64_bits(value) -> bool:
    return type(value) is int and not -(2**63) <= value < 2**64


def _described(value) -> str:
    """An id for a message: ``the string "abc"``, ``the number 7``, ``an array``."""
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    kind = {str: "the string", bool: "the boolean", int: "the number", float: "the number"}
    if type(value) in kind:
        text = json.dumps(value, ensure_ascii=False)
        return f"{kind[type(value)]} {text if len(text) <= 60 else text[:57] + '...'}"
    return "an array" if isinstance(value, list) else "an object"
