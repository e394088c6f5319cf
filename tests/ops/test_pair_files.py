import threading
from pathlib import Path

import pyarrow as pa
import pytest

from ops.pairs.pair_files import PairWriter, iter_pair_chunks, iter_pairs, pair_file_info
from ops.stage_report import StageReport


def test_pair_file_round_trip_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    pairs = [(f"english {i} ü", f"deutsch {i} 中") for i in range(1000)]
    with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
        for start in range(0, 1000, 300):
            chunk = pairs[start : start + 300]
            writer.write([p[0] for p in chunk], [p[1] for p in chunk])
    assert writer.n_pairs == 1000
    assert pair_file_info(path) == (1000, "en", "de", False)
    assert list(iter_pairs(path, batch_size=128)) == pairs
    assert max(len(src) for src, _, _ in iter_pair_chunks(path, batch_size=128)) == 128


def test_pair_file_with_scores(tmp_path: Path) -> None:
    path = tmp_path / "scored.parquet"
    with PairWriter(path, src_lang="en", tgt_lang="en", with_score=True) as writer:
        writer.write(["a b"], ["a c"], [0.5])
    assert [c for c in iter_pair_chunks(path)] == [(["a b"], ["a c"], [0.5])]
    with pytest.raises(ValueError, match="with_score=True"):
        with PairWriter(path, src_lang="en", tgt_lang="en", with_score=True) as writer:
            writer.write(["a"], ["b"])


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    with pytest.raises(RuntimeError):
        with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
            writer.write(["x"], ["y"])
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="1 source lines but 2 target lines"):
        with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
            writer.write(["x"], ["y", "z"])


def test_stage_report_accounts_for_every_pair() -> None:
    report = StageReport("length")
    report.n_in, report.n_out = 10, 7
    report.drop("too_short", 2)
    report.drop("too_long")
    assert report.finish().as_dict()["dropped"] == {"too_long": 1, "too_short": 2}
    report.drop("too_long")
    with pytest.raises(AssertionError, match="10 pairs in but 7 out"):
        report.finish()


def writer_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("pair-writer")]


def test_background_writer_writes_every_batch_in_order(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    pairs = [(f"english {i}", f"deutsch {i}") for i in range(1000)]
    with PairWriter(path, src_lang="en", tgt_lang="de", background=True) as writer:
        assert len(writer_threads()) == 1
        for start in range(0, 1000, 70):
            chunk = pairs[start : start + 70]
            writer.write([p[0] for p in chunk], [p[1] for p in chunk])
    assert writer.n_pairs == 1000 and list(iter_pairs(path)) == pairs
    assert writer_threads() == []


def test_background_write_error_is_raised_and_leaves_no_file(tmp_path: Path) -> None:
    # the cast to the file's schema happens on the writing thread: a struct column cannot
    # become a string column, so that thread fails and the caller must hear of it
    unwritable = pa.table({"src": [{"a": 1}], "tgt": ["x"]})
    path = tmp_path / "pairs.parquet"
    with pytest.raises(pa.ArrowNotImplementedError):
        with PairWriter(path, src_lang="en", tgt_lang="de", background=True) as writer:
            writer.write(["a"], ["x"])
            writer.write_batch(unwritable)
            for _ in range(50):  # raised by a later write at the latest, or on leaving
                writer.write(["a"], ["x"])
    assert writer_threads() == [] and list(tmp_path.iterdir()) == []


def test_background_writer_after_a_caller_error_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    with pytest.raises(OSError, match="corpus went away"):
        with PairWriter(path, src_lang="en", tgt_lang="de", background=True) as writer:
            writer.write(["a"], ["x"])
            raise OSError("corpus went away")
    assert writer_threads() == [] and list(tmp_path.iterdir()) == []
