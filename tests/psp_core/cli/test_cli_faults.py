"""The ``psp`` command under faults: every command answers one ``psp: error:`` line and exit
code 2 for outputs that are directories or cannot be written, missing inputs, an evaluation
folder without data and a full disk, and leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from tests.psp_core.cli_runs import PSP_SCRIPT, command, one_error_line, run_main, run_psp
from tests.psp_core.filesystems import listing, read_only_directory, tiny_tmpfs

FILE_OUTPUTS = ["embed", "score", "evaluate", "mine"]
DIRECTORY_OUTPUTS = ["train", "fetch-eval-data"]


# --- output paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILE_OUTPUTS)
def test_output_file_that_is_a_directory(tmp_path, bundle, inputs, capsys, name):
    output = tmp_path / "out"
    (output / "kept.txt").parent.mkdir()
    (output / "kept.txt").write_text("untouched")
    run_main(capsys, command(name, bundle, inputs, output), str(output), "is a directory")
    assert listing(output) == ["kept.txt"]
    assert listing(tmp_path) == sorted(["bundle", "eval", "inputs", "out"])


@pytest.mark.parametrize("name", DIRECTORY_OUTPUTS)
def test_output_directory_that_is_a_file(tmp_path, bundle, inputs, train_inputs, capsys, name):
    output = tmp_path / "out"
    output.write_text("untouched")
    argv = command(name, bundle, {**inputs, **train_inputs}, output)
    run_main(capsys, argv, str(output), "is not a directory")
    assert output.read_text() == "untouched"


@pytest.mark.parametrize("name", FILE_OUTPUTS + DIRECTORY_OUTPUTS)
def test_output_below_a_file(tmp_path, bundle, inputs, train_inputs, capsys, name):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory would have to be")
    output = blocker / "sub" / "out"
    argv = command(name, bundle, {**inputs, **train_inputs}, output)
    run_main(capsys, argv, str(output), f"{blocker} is not a directory")


@pytest.mark.parametrize("name", FILE_OUTPUTS + DIRECTORY_OUTPUTS)
def test_output_in_a_directory_that_cannot_be_written(
    tmp_path, bundle, inputs, train_inputs, capsys, name
):
    with read_only_directory(tmp_path / "locked") as locked:
        output = locked / "sub" / "out"
        argv = command(name, bundle, {**inputs, **train_inputs}, output)
        run_main(capsys, argv, str(output), f"cannot write in {locked}")
        assert listing(locked) == []


def test_train_checkpoint_dir_that_is_a_file(tmp_path, train_inputs, capsys):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.write_text("untouched")
    argv = command("train", Path(), train_inputs, tmp_path / "model")
    run_main(capsys, argv + ["--checkpoint-dir", str(checkpoint)], str(checkpoint))


def test_train_refuses_a_negative_max_length_before_training(tmp_path, train_inputs, capsys):
    argv = command("train", Path(), train_inputs, tmp_path / "model") + ["--max-length", "-5"]
    run_main(capsys, argv, "--max-length must be 0 (no limit) or positive, got -5")
    assert not (tmp_path / "model").exists()


# --- missing inputs -------------------------------------------------------------------------------

MISSING_INPUTS = [
    ("embed", "sentences"),
    ("embed", "model"),
    ("score", "pairs"),
    ("score", "model"),
    ("evaluate", "eval"),
    ("evaluate", "model"),
    ("mine", "sentences"),
    ("mine", "model"),
    ("train", "data"),
    ("train", "spm"),
    ("fetch-eval-data", "sources"),
]


@pytest.mark.parametrize(("name", "missing"), MISSING_INPUTS)
def test_missing_input(tmp_path, bundle, inputs, train_inputs, capsys, name, missing):
    absent = tmp_path / "absent"
    paths = {missing: absent}
    model = absent if missing == "model" else bundle
    output = tmp_path / "out"
    argv = command(name, model, {**inputs, **train_inputs}, output, **paths)
    run_main(capsys, argv, str(absent))
    assert not output.exists()


def test_info_of_a_missing_model(tmp_path, capsys):
    run_main(capsys, ["info", str(tmp_path / "absent")], str(tmp_path / "absent"))


def test_train_with_a_missing_dev_file(tmp_path, train_inputs, capsys):
    argv = command("train", Path(), train_inputs, tmp_path / "model")
    run_main(capsys, argv + ["--dev-sts", str(tmp_path / "dev.tsv")], str(tmp_path / "dev.tsv"))


# --- evaluation folder without data ---------------------------------------------------------------


@pytest.mark.parametrize("content", ["empty", "unrelated files", "other suites only"])
def test_evaluate_with_nothing_to_evaluate_is_an_error(tmp_path, bundle, capsys, content):
    eval_dir = tmp_path / "eval"
    (eval_dir / "sts").mkdir(parents=True)
    if content == "unrelated files":
        (eval_dir / "notes.txt").write_text("nothing to see")
        (eval_dir / "sts" / "2012").mkdir()
    if content == "other suites only":
        (eval_dir / "tatoeba").mkdir()
        (eval_dir / "tatoeba" / "xyz-eng.xyz").write_text("a\n")
        (eval_dir / "tatoeba" / "xyz-eng.eng").write_text("b\n")
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(eval_dir), "--output-json"]
    argv += [str(output), "--suites", "sts,sts17,stsb,speed"]
    line = run_main(capsys, argv, str(eval_dir), "sts/YEAR/NAME.tsv", "tatoeba/")
    assert "nothing to evaluate" in line
    assert not output.exists()


# --- a full disk ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["embed", "embed-parquet", "score", "mine"])
def test_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, bundle, inputs, name):
    """A real 64 KiB filesystem with 24 KiB free: the output (1600 x 16 floats for embed, as
    .npy or Parquet, 800 pairs of text for score, the vectors of 1600 lines for mine) does not
    fit. embed and mine used to die of SIGBUS through their memmaps (rc 135)."""
    inputs["sentences"].write_text(inputs["sentences"].read_text() * 20)  # 1600 lines, 100 KiB
    inputs["pairs"].write_text(inputs["pairs"].read_text() * 20)
    with tiny_tmpfs(tmp_path / "disk", size_kib=64) as disk:
        (disk / "filler").write_bytes(b"\0" * 40_000)
        output = disk / ("out.parquet" if name == "embed-parquet" else "out")
        name = name.removesuffix("-parquet")
        completed = run_psp(command(name, bundle, inputs, output))
        assert completed.returncode == 2, completed.stderr
        written = output if name != "mine" else disk  # mine fails on its vectors' work file
        one_error_line(completed.stderr, f"no space left on device writing {written}")
        assert listing(disk) == ["filler"]


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["full disk", "file size limit"])
def test_a_full_disk_while_spooling_standard_input_names_the_spool(tmp_path, bundle, inputs, limit):
    """Standard input is spooled beside the output before it is embedded; a disk that fills
    then is one line naming the spool, not a bare ``[Errno 28]``, and nothing is left."""
    body = inputs["sentences"].read_text() * 40  # 180 KiB
    with contextlib.ExitStack() as stack:
        if limit == "full disk":
            folder = stack.enter_context(tiny_tmpfs(tmp_path / "disk", size_kib=64))
        else:
            folder = tmp_path / "out"
            folder.mkdir()
        output = folder / "vectors.npy"
        argv = ["embed", "--sentence-file", "-", "--model", str(bundle), "--output-file"]
        file_size_limit = 8192 if limit == "file size limit" else None
        completed = run_psp([*argv, str(output)], input=body, file_size_limit=file_size_limit)
        assert completed.returncode == 2, completed.stderr
        reason = "no space left on device" if limit == "full disk" else "file too large"
        line = one_error_line(completed.stderr, f"{reason} spooling standard input to {folder}")
        assert "standard-input" in line
        assert listing(folder) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["embed", "score"])
def test_file_size_limit_is_one_line_and_leaves_no_temporary_file(tmp_path, bundle, inputs, name):
    """RLIMIT_FSIZE (EFBIG) stands in for a full disk where no tmpfs can be mounted."""
    output = tmp_path / "out" / "result"
    output.parent.mkdir()
    completed = run_psp(command(name, bundle, inputs, output), file_size_limit=2048)
    assert completed.returncode == 2, completed.stderr
    one_error_line(completed.stderr, f"writing {output}", "too large")
    assert listing(output.parent) == []


@pytest.mark.slow
def test_score_to_a_full_standard_output(bundle, inputs):
    argv = ["score", "--sentence-pair-file", str(inputs["pairs"]), "--model", str(bundle)]
    with open("/dev/full", "w") as full:
        completed = run_psp(argv, stdout=full)
    assert completed.returncode == 2, completed.stderr
    one_error_line(completed.stderr, "no space left on device writing standard output")


@pytest.mark.slow
def test_score_into_a_closed_pipe_stops_quietly(bundle, inputs):
    inputs["pairs"].write_text(inputs["pairs"].read_text() * 500)  # 20,000 lines, > a pipe
    argv = ["score", "--sentence-pair-file", str(inputs["pairs"]), "--model", str(bundle)]
    process = subprocess.Popen(
        [str(PSP_SCRIPT), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().count("\t") == 2
    process.stdout.close()
    err = process.stderr.read()
    assert process.wait(timeout=120) == 1
    assert "Traceback" not in err and "psp: error" not in err
