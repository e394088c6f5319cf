"""The ``psp`` command under faults: every command answers one ``psp: error:`` line and exit
code 2 for outputs that are directories or cannot be written, missing inputs, an evaluation
folder without data and a full disk, and leaves no temporary file behind."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from psp_core.cli import main
from tests.psp_core.filesystems import listing, read_only_directory, tiny_tmpfs

PSP_SCRIPT = Path(sys.executable).with_name("psp")


@pytest.fixture()
def inputs(tmp_path, toy) -> dict[str, Path]:
    folder = tmp_path / "inputs"
    folder.mkdir()
    pairs = toy.pairs(40, seed=3)
    sentences = folder / "sentences.txt"
    sentences.write_text("".join(f"{a}\n{b}\n" for a, b in pairs), encoding="utf-8")
    pair_file = folder / "pairs.tsv"
    pair_file.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    eval_dir = tmp_path / "eval"
    (eval_dir / "sts17").mkdir(parents=True)
    (eval_dir / "sts17" / "en-en.tsv").write_text(
        "".join(f"{i % 5}.0\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs)), encoding="utf-8"
    )
    return {"sentences": sentences, "pairs": pair_file, "eval": eval_dir}


def command(name: str, bundle: Path, inputs: dict[str, Path], output: Path, **paths) -> list[str]:
    """``psp <name>`` writing to ``output``; ``paths`` replace the default inputs."""
    get = {**inputs, **paths}.get
    return {
        "embed": ["embed", "--sentence-file", str(get("sentences")), "--model", str(bundle)]
        + ["--output-file", str(output)],
        "score": ["score", "--sentence-pair-file", str(get("pairs")), "--model", str(bundle)]
        + ["--output-file", str(output)],
        "evaluate": ["evaluate", "--model", str(bundle), "--eval-dir", str(get("eval"))]
        + ["--suites", "sts17", "--output-json", str(output)],
        "mine": ["mine", "--model", str(bundle), "--source-file", str(get("sentences"))]
        + ["--target-file", str(get("sentences")), "--output-file", str(output)],
        "train": ["train", "--data", str(get("data")), "--spm", str(get("spm"))]
        + ["--output", str(output), "--epochs", "1", "--dim", "8", "--device", "cpu"],
        "fetch-eval-data": ["fetch-eval-data", "--dest", str(output)]
        + ["--sources-json", str(get("sources"))],
    }[name]


@pytest.fixture()
def train_inputs(toy_training_file, spm_path, tmp_path) -> dict[str, Path]:
    sources = tmp_path / "inputs" / "sources.json"
    sources.parent.mkdir(exist_ok=True)
    # an unreachable mirror: a test that got past the checks would fail on the download
    url = "http://127.0.0.1:9/none.zip"
    sources.write_text(json.dumps({"x.zip": {"url": url, "format": "stsb"}}))
    return {"data": toy_training_file, "spm": spm_path, "sources": sources}


def one_error_line(err: str, *fragments: str) -> str:
    """The single ``psp: error:`` line of ``err`` (no traceback), containing every fragment."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("psp: error:")]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def run_main(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    return one_error_line(capsys.readouterr().err, *fragments)


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


def run_psp(argv: list[str], *, file_size_limit: int | None = None, **kwargs):
    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(
        [str(PSP_SCRIPT), *argv],
        text=True,
        timeout=120,
        preexec_fn=limit,
        env=env,
        **streams,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["embed", "score", "mine"])
def test_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, bundle, inputs, name):
    """A real 64 KiB filesystem with 24 KiB free: the output (80 x 16 floats for embed, 40 pairs
    of text for score, the vectors of 1600 lines for mine) does not fit. embed and mine used to
    die of SIGBUS through their memmaps (rc 135)."""
    inputs["sentences"].write_text(inputs["sentences"].read_text() * 20)  # 1600 lines, 100 KiB
    inputs["pairs"].write_text(inputs["pairs"].read_text() * 20)
    with tiny_tmpfs(tmp_path / "disk", size_kib=64) as disk:
        (disk / "filler").write_bytes(b"\0" * 40_000)
        output = disk / "out"
        completed = run_psp(command(name, bundle, inputs, output))
        assert completed.returncode == 2, completed.stderr
        written = output if name != "mine" else disk  # mine fails on its vectors' work file
        one_error_line(completed.stderr, f"no space left on device writing {written}")
        assert listing(disk) == ["filler"]


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
