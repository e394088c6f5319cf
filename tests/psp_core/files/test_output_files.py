"""psp_core.files.output_files: the .npy writer and the temporary-file-then-rename writer."""

from __future__ import annotations

import numpy as np
import pytest

from psp_core.files.output_files import NpyWriter, replaced_when_done, write_text_if_changed
from tests.psp_core.filesystems import listing


def test_npy_writer_writes_what_np_save_writes(tmp_path):
    array = np.random.default_rng(0).standard_normal((1000, 24), dtype=np.float32)
    np.save(tmp_path / "reference.npy", array)
    with replaced_when_done(tmp_path / "written.npy") as handle:
        writer = NpyWriter(handle, array.shape)
        for start in range(0, len(array), 300):  # blocks that do not divide the rows
            writer.write(array[start : start + 300].astype(np.float64))
        writer.close()
    assert (tmp_path / "written.npy").read_bytes() == (tmp_path / "reference.npy").read_bytes()


@pytest.mark.parametrize("rows", [2, 4])
def test_npy_writer_refuses_another_row_count_and_nothing_is_left(tmp_path, rows):
    with pytest.raises(ValueError, match="announced"):
        with replaced_when_done(tmp_path / "out.npy") as handle:
            writer = NpyWriter(handle, (3, 2))
            writer.write(np.zeros((rows, 2), np.float32))
            writer.close()
    assert listing(tmp_path) == []


def test_a_failing_input_is_not_reported_as_a_write_error(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        with replaced_when_done(tmp_path / "out.txt", "w") as handle:
            handle.write((tmp_path / "absent.txt").read_text())
    assert caught.value.filename == str(tmp_path / "absent.txt")
    assert listing(tmp_path) == []


def test_the_same_text_again_leaves_the_file_as_it_was(tmp_path) -> None:
    path = tmp_path / "scores.json"
    assert write_text_if_changed(path, "first\n")
    stamp = (path.stat().st_ino, path.stat().st_mtime_ns)
    assert not write_text_if_changed(path, "first\n")
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp
    assert write_text_if_changed(path, "second\n") and path.read_text() == "second\n"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.json"]
