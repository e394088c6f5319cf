"""Where ``psp embed`` writes its vectors: a ``.npy`` array or a Parquet file with an id column
beside each vector, written behind the embedding on a thread of its own."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from psp_core.cli.corpus_files import CorpusError
from psp_core.files.direct_writes import DirectNpyWriter
from psp_core.files.output_files import reserve_space

#: the Parquet output's id column when no id field is named: the vector's 0-based position
ROW_COLUMN = "row"
VECTOR_COLUMN = "embedding"


def is_parquet_output(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def open_vector_writer(
    handle: IO[bytes], output: Path, count: int, dim: int, id_field: str | None
) -> DirectNpyWriter | ParquetVectorWriter:
    """The writer of ``count`` vectors of ``dim`` for ``output`` (Parquet by its suffix, else
    ``.npy``, written past the page cache where it can) on ``handle``; space is reserved first,
    so a full disk fails here."""
    if is_parquet_output(output):
        return ParquetVectorWriter(handle, count, dim, id_field)
    return DirectNpyWriter(handle, (count, dim))


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

    Space for the vectors is reserved first (a full disk fails before any embedding) and given
    back when the file is closed. Ids keep the type of the first batch's ids."""

    def __init__(self, handle: IO[bytes], count: int, dim: int, id_column: str | None) -> None:
        self.handle, self.count, self.dim = handle, count, dim
        self.id_column = id_column or ROW_COLUMN
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._id_type: pa.DataType = pa.int64()
        reserve_space(handle, count * dim * 4)
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
        self.handle.truncate(self.handle.tell())  # the reserved space the file did not use

    def _ids(self, ids: list | pa.Array | None, n: int) -> pa.Array:
        if ids is None:
            return pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64))
        if len(ids) != n:
            raise ValueError(f"{len(ids)} ids for {n} vectors")
        try:
            array = ids if isinstance(ids, pa.Array) else pa.array(ids)
            if self._writer is not None and array.type != self._id_type:
                array = array.cast(self._id_type)
        except pa.ArrowException as error:  # a value or a type that does not convert
            raise CorpusError(
                f'id field "{self.id_column}": values of different types near vector '
                f"{self.rows} ({error})"
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
