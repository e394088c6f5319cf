"""Outputs that are not regular files: every command writes into a device, a FIFO, standard
output (``-``, ``/dev/stdout``) instead of renaming a new file over it, and follows a symbolic
link to replace its target, keeping the link. Device nodes and FIFOs are the test's own, made
in its temporary folder; the machine's /dev is never written."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from psp_core.cli import main
from psp_core.inference.model import load_model
from psp_core.models.export import export_model, is_export_directory
from tests.psp_core.cli_runs import PSP_SCRIPT, command, run_main
from tests.psp_core.filesystems import (
    FULL_DEVICE,
    character_device,
    drained_fifo,
    is_device,
    is_fifo,
    listing,
)

#: every command that writes an output file; ``embed-parquet`` is embed with a Parquet output
FILE_COMMANDS = ["embed", "embed-parquet", "score", "evaluate", "mine"]


def output_name(name: str, stem: str) -> str:
    """An output file name for ``name``: Parquet outputs need their suffix."""
    return f"{stem}.parquet" if name == "embed-parquet" else stem


def argv(name: str, bundle: Path, inputs, output: Path | str) -> list[str]:
    return command(name.removesuffix("-parquet"), bundle, inputs, output)


def decoded(name: str, data: bytes):
    """What an output's bytes hold, comparable across writers (the .npy header's padding
    differs between a file and a stream)."""
    if name == "embed":
        return np.load(io.BytesIO(data)).tolist()
    if name == "embed-parquet":
        return pq.read_table(pa.BufferReader(data)).to_pydict()
    return data.decode("utf-8")


def expected_output(tmp_path: Path, name: str, bundle: Path, inputs) -> object:
    """The command's output written to a regular file, decoded."""
    reference = tmp_path / "reference" / output_name(name, "out")
    assert main(argv(name, bundle, inputs, reference)) == 0
    return decoded(name, reference.read_bytes())


# --- devices and FIFOs are written into ------------------------------------------------------


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_each_command_writes_into_a_character_device_and_keeps_it(tmp_path, bundle, inputs, name):
    """``--output-file /dev/null`` as root used to rename the output over the node: /dev/null
    became a regular file."""
    node = character_device(tmp_path / "dev" / output_name(name, "null"))

    assert main(argv(name, bundle, inputs, node)) == 0

    assert is_device(node)
    assert listing(node.parent) == [node.name]


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_each_command_writes_into_a_fifo_and_keeps_it(tmp_path, bundle, inputs, name):
    fifo = tmp_path / "pipes" / output_name(name, "fifo")
    with drained_fifo(fifo) as received:
        assert main(argv(name, bundle, inputs, fifo)) == 0

    assert is_fifo(fifo)
    assert listing(fifo.parent) == [fifo.name]
    assert decoded(name, bytes(received)) == expected_output(tmp_path, name, bundle, inputs)


@pytest.mark.parametrize("name", ["embed", "score"])
def test_a_full_device_is_one_line_naming_it_and_stays_a_device(
    tmp_path, bundle, inputs, capsys, name
):
    node = character_device(tmp_path / "dev" / "full", FULL_DEVICE)
    run_main(capsys, argv(name, bundle, inputs, node), f"no space left on device writing {node}")
    assert is_device(node, FULL_DEVICE)
    assert listing(node.parent) == ["full"]


def _run_psp_binary(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(PSP_SCRIPT), *arguments], cwd=cwd, capture_output=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["embed", "score"])
@pytest.mark.parametrize("spelling", ["-", "link to /proc/self/fd/1"])
def test_standard_output_is_written_into(tmp_path, bundle, inputs, name, spelling):
    """``--output-file -`` and a link to the process's standard output (what /dev/stdout is)
    write to standard output; the link stays a link and no file appears."""
    work = tmp_path / "work"
    work.mkdir()
    output = "-"
    if spelling != "-":
        output = work / "stdout"
        output.symlink_to("/proc/self/fd/1")

    completed = _run_psp_binary(argv(name, bundle, inputs, output), work)

    assert completed.returncode == 0, completed.stderr
    assert decoded(name, completed.stdout) == expected_output(tmp_path, name, bundle, inputs)
    assert listing(work) == ([] if spelling == "-" else ["stdout"])
    if spelling != "-":
        assert os.readlink(work / "stdout") == "/proc/self/fd/1"


@pytest.mark.parametrize("name", ["score", "mine"])
def test_a_dash_writes_text_outputs_to_standard_output(
    tmp_path, bundle, inputs, capsys, monkeypatch, name
):
    monkeypatch.chdir(tmp_path)
    expected = expected_output(tmp_path, name, bundle, inputs)
    capsys.readouterr()
    assert main(argv(name, bundle, inputs, "-")) == 0
    assert capsys.readouterr().out == expected
    assert not (tmp_path / "-").exists()


def test_evaluate_json_to_standard_output_moves_the_tables_to_standard_error(
    tmp_path, bundle, inputs, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    expected = expected_output(tmp_path, "evaluate", bundle, inputs)
    tables = capsys.readouterr().out
    assert main(argv("evaluate", bundle, inputs, "-")) == 0
    captured = capsys.readouterr()
    assert captured.out == expected
    assert json.loads(captured.out)["sts17"]
    assert tables in captured.err
    assert not (tmp_path / "-").exists()


# --- symbolic links are followed ---------------------------------------------------------------


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_an_output_link_replaces_its_target_and_stays_a_link(tmp_path, bundle, inputs, name):
    """An output that is a link to an earlier output (``latest -> runs/v1``): the target gets the
    new content (as ``cp``, ``sort -o`` and ``tee`` write through a link), the link is kept, and
    no temporary is left beside either."""
    target = tmp_path / "runs" / output_name(name, "v1")
    target.parent.mkdir()
    target.write_bytes(b"the earlier output")
    link = tmp_path / "out" / output_name(name, "latest")
    link.parent.mkdir()
    link.symlink_to(Path("..") / "runs" / target.name)

    assert main(argv(name, bundle, inputs, link)) == 0

    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "runs" / target.name)
    assert decoded(name, target.read_bytes()) == expected_output(tmp_path, name, bundle, inputs)
    assert listing(link.parent) == [link.name]
    assert listing(target.parent) == [target.name]


def test_a_dangling_output_link_creates_its_target(tmp_path, bundle, inputs):
    target = tmp_path / "runs" / "v2.npy"
    link = tmp_path / "latest.npy"
    link.symlink_to(target)

    assert main(argv("embed", bundle, inputs, link)) == 0

    assert link.is_symlink()
    expected = load_model(bundle).embed(inputs["sentences"].read_text().splitlines())
    np.testing.assert_allclose(np.load(target), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["embed", "score", "mine"])
def test_an_output_link_to_an_input_is_refused(tmp_path, bundle, inputs, capsys, name):
    source = inputs["pairs" if name == "score" else "sentences"]
    before = source.read_bytes()
    link = tmp_path / "out" / "result"
    link.parent.mkdir()
    link.symlink_to(source)
    run_main(capsys, argv(name, bundle, inputs, link), f"{link} is the input")
    assert source.read_bytes() == before and link.is_symlink()


def test_an_export_into_a_linked_folder_replaces_the_target_and_keeps_the_link(tmp_path, bundle):
    """The link's target folder is replaced whole; nothing (``NAME.tmp-PID``) is left beside
    the link or the target once the export succeeded."""
    pytest.importorskip("model2vec")
    target = export_model(bundle, "model2vec", tmp_path / "exports" / "de-v1")
    (target / "stale.txt").write_text("from the earlier export")
    link = tmp_path / "out" / "de"
    link.parent.mkdir()
    link.symlink_to(target)

    arguments = ["export", "--model", str(bundle), "--output", str(link), "--format", "model2vec"]
    assert main(arguments) == 0

    assert listing(link.parent) == ["de"]
    assert listing(target.parent) == ["de-v1"]
    assert link.is_symlink() and link.resolve() == target
    assert is_export_directory(target) and not (target / "stale.txt").exists()


@pytest.mark.slow
def test_train_into_a_linked_folder_replaces_the_target_and_keeps_the_link(
    tmp_path, train_inputs, bundle
):
    target = tmp_path / "models" / "de-v1"
    target.parent.mkdir()
    os.rename(bundle, target)  # an earlier bundle
    link = tmp_path / "out" / "de"
    link.parent.mkdir()
    link.symlink_to(target)
    checkpoints = tmp_path / "scratch" / "checkpoints"  # written through a link too
    checkpoints.mkdir(parents=True)
    (tmp_path / "checkpoints").symlink_to(checkpoints)
    arguments = command("train", target, train_inputs, link)
    arguments += ["--checkpoint-dir", str(tmp_path / "checkpoints")]

    assert main(arguments) == 0

    assert listing(link.parent) == ["de"]
    assert listing(target.parent) == ["de-v1"]
    assert link.is_symlink() and link.resolve() == target
    assert load_model(link).dim == 8  # the new bundle (the earlier one had dim 16)
    # the checkpoint is removed once training ended; the link and its folder stay for the next
    assert (tmp_path / "checkpoints").is_symlink() and listing(checkpoints) == []


def test_a_directory_output_that_is_a_device_is_refused(tmp_path, bundle, capsys):
    node = character_device(tmp_path / "dev" / "null")
    arguments = ["export", "--model", str(bundle), "--output", str(node), "--format", "model2vec"]
    line = run_main(capsys, arguments, f"export folder {node}", "not a directory")
    assert "Traceback" not in line
    assert is_device(node)


def test_standard_output_is_no_folder(tmp_path, bundle, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    arguments = ["export", "--model", str(bundle), "--output", "-", "--format", "model2vec"]
    run_main(capsys, arguments, "export folder -", "standard output")
    assert listing(tmp_path) == ["bundle"]
