"""``resolve_output``, the one place that decides how an output path is written, and the writers
that follow it: a regular file is replaced through a temporary beside it, a link's target is
replaced and the link kept, a device or FIFO is written into. Nodes and FIFOs are the test's own;
the machine's /dev is never written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from psp_core.files.output_dirs import (
    STREAM_WORK,
    directory_written_then_replaced,
    work_directory_beside,
)
from psp_core.files.output_files import (
    OutputError,
    check_output_directory,
    check_output_file,
    replaced_when_done,
)
from psp_core.files.output_targets import (
    DIRECTORY,
    FILE,
    STANDARD_OUTPUT,
    STREAM,
    resolve_output,
)
from tests.ops.temp_writers import killed_writer
from tests.psp_core.filesystems import (
    FULL_DEVICE,
    character_device,
    drained_fifo,
    is_device,
    listing,
)


def test_regular_files_and_new_paths_are_replaced_in_place(tmp_path):
    existing = tmp_path / "old.npy"
    existing.write_bytes(b"old")
    for path in (existing, tmp_path / "new.npy", tmp_path / "missing" / "folder" / "x.npy"):
        output = resolve_output(path)
        assert (output.kind, output.target, output.given) == (FILE, path, str(path))
        assert os.fspath(output) == str(path) and output.link is None


def test_a_chain_of_links_resolves_to_its_last_target(tmp_path):
    target = tmp_path / "runs" / "v1.npy"
    target.parent.mkdir()
    (tmp_path / "middle").symlink_to(Path("runs") / "v1.npy")  # relative
    (tmp_path / "latest.npy").symlink_to(tmp_path / "middle")
    output = resolve_output(tmp_path / "latest.npy")
    assert (output.kind, output.target) == (FILE, target)
    assert output.link == tmp_path / "latest.npy"
    assert output.shown == f"{tmp_path / 'latest.npy'} (a link to {target})"


def test_links_among_the_folders_are_followed_too(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    output = resolve_output(tmp_path / "alias" / "x.tsv")
    assert (output.kind, output.target) == (FILE, tmp_path / "real" / "x.tsv")


def test_devices_fifos_and_descriptors_are_streams(tmp_path):
    node = character_device(tmp_path / "null")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "via-link").symlink_to(node)
    (tmp_path / "stdout").symlink_to("/proc/self/fd/1")
    block = tmp_path / "block"
    os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(7, 250))  # looked at, never opened
    for path, target in [
        (node, node),
        (tmp_path / "fifo", tmp_path / "fifo"),
        (tmp_path / "via-link", node),
        (block, block),
        (tmp_path / "stdout", tmp_path / "stdout"),  # a descriptor: written as it is opened
    ]:
        output = resolve_output(path)
        assert (output.kind, output.target) == (STREAM, target), path
        assert output.streamed
    assert resolve_output("/dev/stdout").kind == STREAM  # (only looked at)


def test_a_dash_is_standard_output_and_folders_are_directories(tmp_path):
    output = resolve_output("-")
    assert (output.kind, output.target, output.streamed) == (STANDARD_OUTPUT, None, True)
    assert output.shown == "standard output"
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder-link").symlink_to(tmp_path / "folder")
    assert resolve_output(tmp_path / "folder-link").kind == DIRECTORY
    assert resolve_output(tmp_path / "folder-link").target == tmp_path / "folder"


def test_sockets_and_endless_links_are_refused(tmp_path):
    import socket

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OutputError, match="too many levels of symbolic links"):
        resolve_output(tmp_path / "a")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        with pytest.raises(OutputError, match="is a socket"):
            resolve_output(tmp_path / "sock")


def test_check_output_file_checks_the_folder_of_the_target(tmp_path):
    """The temporary is made beside the target, so that is the folder that must be writable;
    the link's own folder need not be."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file" / "below")
    with pytest.raises(OutputError, match="is not a directory"):
        check_output_file(tmp_path / "link")
    node = character_device(tmp_path / "dev" / "null")
    assert check_output_file(node).kind == STREAM
    assert check_output_file("-", inputs=[tmp_path / "file"]).kind == STANDARD_OUTPUT


def test_an_output_link_to_an_input_is_refused(tmp_path):
    source = tmp_path / "sentences.txt"
    source.write_text("keep me\n")
    (tmp_path / "out").symlink_to(source)
    with pytest.raises(OutputError, match="is the input"):
        check_output_file(tmp_path / "out", inputs=[source])
    (tmp_path / "folder-link").symlink_to(tmp_path)
    with pytest.raises(OutputError, match="contains the input"):
        check_output_directory(tmp_path / "folder-link", inputs=[source])


def test_a_folder_output_cannot_be_a_stream(tmp_path):
    node = character_device(tmp_path / "null")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        check_output_directory(node)
    with pytest.raises(OutputError, match="standard output"):
        check_output_directory("-")
    with pytest.raises(OutputError, match="is not a folder"):
        with directory_written_then_replaced(node):
            pass
    assert is_device(node)


# --- writing ---------------------------------------------------------------------------------


def test_a_link_target_is_replaced_and_the_link_kept(tmp_path):
    target = tmp_path / "runs" / "scores.tsv"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "out" / "latest.tsv"
    link.parent.mkdir()
    link.symlink_to(target)
    with replaced_when_done(link, "w") as handle:
        assert Path(handle.name).parent == target.parent  # the temporary is beside the target
        handle.write("new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert listing(link.parent) == ["latest.tsv"] and listing(target.parent) == ["scores.tsv"]


def test_a_failed_write_through_a_link_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "runs" / "scores.tsv"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "latest.tsv"
    link.symlink_to(target)
    with pytest.raises(RuntimeError), replaced_when_done(link, "w") as handle:
        handle.write("half")
        raise RuntimeError("stop")
    assert target.read_text() == "old\n" and link.is_symlink()
    assert listing(target.parent) == ["scores.tsv"]


def test_a_device_is_written_into(tmp_path):
    node = character_device(tmp_path / "null")
    with replaced_when_done(node) as handle:
        handle.write(b"x" * 100_000)
    assert is_device(node) and listing(tmp_path) == ["null"]


def test_a_full_device_is_an_error_naming_it(tmp_path):
    node = character_device(tmp_path / "full", FULL_DEVICE)
    with pytest.raises(OutputError, match=f"no space left on device writing {node}"):
        with replaced_when_done(node) as handle:
            handle.write(b"x" * 100_000)
    assert is_device(node, FULL_DEVICE)


def test_a_fifo_receives_every_byte_in_order(tmp_path):
    payload = bytes(range(256)) * 4096  # 1 MiB: many times a pipe's buffer
    with drained_fifo(tmp_path / "fifo") as received:
        with replaced_when_done(tmp_path / "fifo") as handle:
            handle.write(payload)
    assert bytes(received) == payload
    assert stat.S_ISFIFO((tmp_path / "fifo").lstat().st_mode)


def test_a_folder_link_keeps_the_link_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "exports" / "de-v1"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("old")
    link = tmp_path / "out" / "de"
    link.parent.mkdir()
    link.symlink_to(target)
    with directory_written_then_replaced(link) as tmp:
        assert tmp.parent == target.parent
        (tmp / "new.txt").write_text("new")
    assert link.is_symlink() and listing(target) == ["new.txt"]
    assert listing(link.parent) == ["de"] and listing(target.parent) == ["de-v1"]


def test_what_killed_writers_left_is_swept_beside_the_target_and_the_link(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    runs.mkdir(), out.mkdir()
    target, link = runs / "v1.tsv", out / "latest.tsv"
    link.symlink_to(target)
    beside_target = killed_writer(runs, [".v1.tsv.tmp-{pid}"])
    beside_link = killed_writer(out, ["latest.tsv.tmp-{pid}"])  # a writer that replaced links
    with replaced_when_done(link, "w") as handle:
        handle.write("x\n")
    assert listing(runs) == ["v1.tsv"] and listing(out) == ["latest.tsv"]
    assert beside_target and beside_link


def test_the_work_folder_of_a_stream_is_in_the_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    dead = killed_writer(tmp_path / "scratch", [f"{STREAM_WORK}.tmp-{{pid}}/"])
    node = character_device(tmp_path / "dev" / "null")
    with work_directory_beside(node) as work:
        assert work == tmp_path / "scratch" / f"{STREAM_WORK}.tmp-{os.getpid()}"
        assert listing(tmp_path / "scratch") == [work.name]  # the dead run's was removed
        assert dead != os.getpid()
    assert listing(tmp_path / "scratch") == [] and listing(node.parent) == ["null"]
