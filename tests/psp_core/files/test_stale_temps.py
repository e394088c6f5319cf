"""remove_stale_temps(): the temporaries of a process killed with SIGKILL go, those of live
processes and every other file stay."""

from __future__ import annotations

import os
from pathlib import Path

from psp_core.files.stale_temps import remove_stale_temps, remove_stale_temps_beside
from tests.ops.temp_writers import killed_writer, live_writer

#: Every temporary naming of the project's writers (see psp_core.files.stale_temps), {pid} = the writer's.
TEMP_NAMES = [
    ".raw.parquet.tmp-{pid}",  # PairWriter, atomic_path, a stage's manifest
    "train.h5.tmp-{pid}",  # TrainingFileWriter
    "model.tmp-{pid}/",  # a model bundle being written (a directory)
    "model.old-{pid}/",  # the bundle it replaces (the new one took the name: see OTHER_NAMES)
    "checkpoint-abc/step-7.safetensors.tmp-{pid}",  # a checkpoint, one level down
]
#: Files that are not temporaries of a writer, whatever process made them.
OTHER_NAMES = [
    "pairs.parquet",
    "manifest.json",
    "de-en.txt.zip.part",  # a download to resume
    "de-en.txt.zip.part.validator",
    "notes.tmp-draft",
    "a.tmp-12.txt",
    "x.tmp-0",
    "model",  # the new bundle, in place
]


def names_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


def test_temps_of_a_killed_process_are_removed_and_the_rest_kept(tmp_path: Path) -> None:
    dead = killed_writer(tmp_path, TEMP_NAMES)
    for name in OTHER_NAMES:
        (tmp_path / name).write_text("keep")
    mine = tmp_path / f".pairs.parquet.tmp-{os.getpid()}"
    mine.write_text("being written by this process")
    with live_writer(tmp_path, [".shuffled.parquet.tmp-{pid}", "model.tmp-{pid}/"]) as alive:
        stale = {tmp_path / name.format(pid=dead).rstrip("/") for name in TEMP_NAMES}
        assert all(path.exists() for path in stale)
        assert (tmp_path / f".raw.parquet.tmp-{dead}").stat().st_size == 526_000

        removed = remove_stale_temps(tmp_path)

        assert set(removed) == stale
        assert names_under(tmp_path) == {
            *OTHER_NAMES,
            mine.name,
            f".shuffled.parquet.tmp-{alive}",
            f"model.tmp-{alive}",
            f"model.tmp-{alive}/part-0",
            "checkpoint-abc",
        }


def test_a_missing_or_clean_directory_is_left_alone(tmp_path: Path) -> None:
    assert remove_stale_temps(tmp_path / "absent") == []
    (tmp_path / "pairs.parquet").write_text("keep")
    assert remove_stale_temps(tmp_path) == []
    assert names_under(tmp_path) == {"pairs.parquet"}


def test_an_old_directory_whose_replacement_was_cut_off_takes_its_name_again(tmp_path) -> None:
    """Killed between its two renames (old aside, new in), a replacement leaves NAME missing:
    the old directory is put back, whole, and the half-written new one removed."""
    dead = killed_writer(tmp_path, ["model.old-{pid}/", "model.tmp-{pid}/"])
    assert not (tmp_path / "model").exists()

    removed = remove_stale_temps(tmp_path)

    assert removed == [tmp_path / f"model.tmp-{dead}"]
    assert names_under(tmp_path) == {"model", "model/part-0"}


def test_temps_beside_one_output_are_removed_and_nothing_else(tmp_path) -> None:
    names = [".vectors.npy.tmp-{pid}", "export.tmp-{pid}/", "export.old-{pid}/", ".other.tmp-{pid}"]
    dead = killed_writer(tmp_path, names)
    (tmp_path / "export").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f".vectors.npy.tmp-{dead}").write_text("another folder: kept")

    assert sorted(remove_stale_temps_beside(tmp_path / "vectors.npy")) == [
        tmp_path / f".vectors.npy.tmp-{dead}"
    ]
    assert sorted(remove_stale_temps_beside(tmp_path / "export")) == [
        tmp_path / f"export.old-{dead}",
        tmp_path / f"export.tmp-{dead}",
    ]
    assert names_under(tmp_path) == {
        f".other.tmp-{dead}",
        "export",
        "sub",
        f"sub/.vectors.npy.tmp-{dead}",
    }
