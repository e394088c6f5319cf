"""Shell mistakes that used to destroy a user's files (each with exit code 0) or end in a
traceback: every command refuses, before any work and with one ``psp: error:`` line and exit
code 2, an output that is its input (or holds it, or lies inside it) and an existing folder of
other files (unless ``--overwrite``); the failures a user can cause are one line; exported
files get the umask's mode."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from psp_core.cli import main
from psp_core.models.bundle import load_bundle
from psp_core.models.export import export_model, is_export_directory
from tests.child_signals import default_sigint
from tests.ops.temp_writers import killed_writer, live_writer
from tests.psp_core.cli_runs import (
    PSP_SCRIPT,
    command,
    one_error_line,
    run_main,
    run_psp,
    tree,
)
from tests.psp_core.filesystems import listing, tiny_tmpfs


def export_argv(model: Path, output: Path | str) -> list[str]:
    return ["export", "--model", str(model), "--output", str(output), "--format", "model2vec"]


# --- outputs that are the input, hold it or lie inside it -----------------------------------------


def test_export_onto_its_own_model_is_refused(bundle, capsys):
    before = tree(bundle)
    run_main(capsys, export_argv(bundle, bundle), f"export folder {bundle} is the input")
    assert tree(bundle) == before
    load_bundle(bundle)


def test_export_onto_the_folder_holding_its_model_is_refused(tmp_path, bundle, capsys):
    (tmp_path / "notes.txt").write_text("keep me")
    before = tree(tmp_path)
    run_main(capsys, export_argv(bundle, tmp_path), "contains the input", str(bundle))
    assert tree(tmp_path) == before


def test_export_into_its_model_is_refused(bundle, capsys):
    before = tree(bundle)
    run_main(capsys, export_argv(bundle, bundle / "export"), "is inside the input folder")
    assert tree(bundle) == before


@pytest.mark.parametrize("link", ["same path", "symbolic link", "hard link"])
def test_embed_onto_its_sentence_file_is_refused(tmp_path, bundle, inputs, capsys, link):
    sentences = inputs["sentences"]
    before = sentences.read_bytes()
    output = {"same path": sentences, "symbolic link": tmp_path / "s.npy"}.get(link)
    if link == "symbolic link":
        output.symlink_to(sentences)
    elif link == "hard link":
        output = tmp_path / "hard.npy"
        os.link(sentences, output)
    run_main(capsys, command("embed", bundle, inputs, output), "is the input", str(sentences))
    assert sentences.read_bytes() == before


@pytest.mark.parametrize(
    "name, input_key", [("score", "pairs"), ("mine", "sentences"), ("evaluate", "eval")]
)
def test_other_commands_refuse_to_write_onto_or_into_their_inputs(
    bundle, inputs, capsys, name, input_key
):
    source = inputs[input_key]
    output = source / "results.json" if source.is_dir() else source
    before = tree(source) if source.is_dir() else source.read_bytes()
    run_main(capsys, command(name, bundle, inputs, output), str(source))
    assert (tree(source) if source.is_dir() else source.read_bytes()) == before
    # and the model folder is an input of each of them
    run_main(capsys, command(name, bundle, inputs, bundle / "out.txt"), "inside the input folder")


# --- existing folders of other files --------------------------------------------------------------


def test_export_onto_a_folder_of_other_files_is_refused_unless_overwrite(tmp_path, bundle, capsys):
    target = tmp_path / "out"
    target.mkdir()
    (target / "important.txt").write_text("keep me")
    run_main(capsys, export_argv(bundle, target), "is not an earlier export", "--overwrite")
    assert listing(target) == ["important.txt"]
    assert listing(tmp_path) == ["bundle", "out"]  # nothing was built

    assert main([*export_argv(bundle, target), "--overwrite"]) == 0
    assert is_export_directory(target) and "important.txt" not in listing(target)
    # an earlier export is the command's own output: replaced without being asked
    argv = ["export", "--model", str(bundle), "--output", str(target)]
    assert main([*argv, "--format", "sentence-transformers"]) == 0
    assert "modules.json" in listing(target)


def test_train_onto_a_folder_of_other_files_is_refused_before_training(
    tmp_path, train_inputs, capsys
):
    target = tmp_path / "DIR"
    target.mkdir()
    (target / "important.txt").write_text("keep me")
    argv = command("train", None, train_inputs, target)
    line = run_main(capsys, argv, str(target), "not a psp model bundle", "--overwrite")
    assert "refusing to replace it" in line
    assert listing(target) == ["important.txt"]
    assert not (tmp_path / "DIR.checkpoint").exists()  # refused before training started

    assert main([*argv, "--overwrite"]) == 0
    assert listing(target) == sorted(["README.md", "config.json", *BUNDLE_DATA])
    before = target.joinpath("embeddings.safetensors").read_bytes()
    # an earlier bundle is the command's own output: replaced without being asked
    assert main([*argv, "--lr", "0.5", "--no-resume"]) == 0
    assert target.joinpath("embeddings.safetensors").read_bytes() != before
    load_bundle(target)


BUNDLE_DATA = ["embeddings.safetensors", "sentencepiece.model"]


def test_train_checkpoint_dir_of_other_files_is_refused(tmp_path, train_inputs, capsys):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "important.txt").write_text("keep me")
    argv = command("train", None, train_inputs, tmp_path / "model") + ["--checkpoint-dir"]
    run_main(capsys, [*argv, str(folder)], "checkpoint directory", "not a psp training checkpoint")
    assert listing(folder) == ["important.txt"]
    assert not (tmp_path / "model").exists()


def test_train_output_and_checkpoint_dir_that_overlap_are_refused_before_training(
    tmp_path, train_inputs, capsys
):
    """The same folder, or one inside the other: refused at once, nothing trained or written
    (it used to train the whole run, then refuse to write the bundle)."""
    for output, checkpoint in (("X", "X"), ("X", "X/ck"), ("ck/X", "ck")):
        argv = command("train", None, train_inputs, tmp_path / output)
        argv += ["--checkpoint-dir", str(tmp_path / checkpoint)]
        run_main(capsys, argv, "--checkpoint-dir", "give them separate folders")
        assert not (tmp_path / output).exists() and not (tmp_path / checkpoint).exists()
    from psp_core import TrainConfig, train
    from psp_core.files.output_files import OutputError

    with pytest.raises(OutputError, match="give them separate folders"):
        train(
            train_inputs["data"],
            train_inputs["spm"],
            tmp_path / "Y",
            TrainConfig(dim=8, epochs=1),
            checkpoint_dir=tmp_path / "Y",
        )
    assert not (tmp_path / "Y").exists()


def test_train_onto_its_own_inputs_is_refused(tmp_path, train_inputs, capsys):
    spm_folder = train_inputs["spm"].parent
    before = tree(spm_folder)
    argv = command("train", None, train_inputs, spm_folder)
    run_main(capsys, [*argv, "--overwrite"], "contains the input", str(train_inputs["spm"]))
    assert tree(spm_folder) == before


# --- one line for every failure the user can cause -------------------------------------------------


def test_export_onto_an_existing_file_is_refused_before_any_work(tmp_path, bundle, capsys):
    target = tmp_path / "afile"
    target.write_text("keep me")
    run_main(capsys, export_argv(bundle, target), str(target), "exists and is not a directory")
    assert target.read_text() == "keep me"
    assert listing(tmp_path) == ["afile", "bundle"]  # no half-built export beside it


@pytest.mark.parametrize("output", [".", "..", "/"])
def test_export_to_the_current_directory_is_one_line(tmp_path, bundle, capsys, monkeypatch, output):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    run_main(capsys, export_argv(bundle, output), f"export folder {output}")
    assert listing(work) == []
    assert listing(tmp_path) == ["bundle", "work"]


@pytest.mark.parametrize("format", ["model2vec", "sentence-transformers"])
def test_export_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, bundle, capsys, format):
    pytest.importorskip(format.replace("-", "_"))
    with tiny_tmpfs(tmp_path / "disk", size_kib=128) as disk:
        argv = ["export", "--model", str(bundle), "--output", str(disk / "out")]
        run_main(capsys, [*argv, "--format", format], f"no space left on device writing {disk}")
        assert listing(disk) == []


@pytest.mark.parametrize("device", ["cuda:7", "gpu", "cuda:x", "tpu"])
def test_a_device_that_is_not_there_is_one_line(tmp_path, bundle, inputs, capsys, device):
    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    output = tmp_path / "out.npy"
    argv = command("embed", bundle, inputs, output) + ["--device", device]
    run_main(capsys, argv, f"device {device!r}")
    assert not output.exists()


@pytest.mark.slow
def test_evaluate_on_an_empty_folder_is_one_line_and_nothing_else(tmp_path, bundle):
    (tmp_path / "empty").mkdir()
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(tmp_path / "empty")]
    completed = run_psp(argv)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1, completed.stderr  # no warning flood first
    one_error_line(completed.stderr, "nothing to evaluate")


@pytest.mark.parametrize("format", ["model2vec", "sentence-transformers"])
def test_exported_files_get_the_umask_mode(tmp_path, bundle, format):
    pytest.importorskip(format.replace("-", "_"))
    previous = os.umask(0o027)
    try:
        output = export_model(bundle, format, tmp_path / "out")
    finally:
        os.umask(previous)
    modes = {name: oct(p.stat().st_mode & 0o777) for name, p in _files(output)}
    assert "model.safetensors" in modes  # safetensors writes it through a 0600 temporary
    assert set(modes.values()) == {oct(0o640)}, modes


def _files(root: Path):
    return [(str(p.relative_to(root)), p) for p in root.rglob("*") if p.is_file()]


# --- Ctrl-C, SIGTERM and kill -9 in the middle of psp embed -------------------------------------


def _embed_started(
    tmp_path: Path, bundle: Path, inputs, preexec_fn=default_sigint
) -> tuple[subprocess.Popen, Path]:
    """``psp embed`` of 300,000 lines, just started (by default taking Ctrl-C: psp would
    otherwise finish in a background test run)."""
    big = tmp_path / "big.txt"
    big.write_text(inputs["sentences"].read_text() * 3750)
    output = tmp_path / "out" / "vectors.npy"
    argv = command("embed", bundle, inputs, output, sentences=big)
    process = subprocess.Popen(
        [str(PSP_SCRIPT), *argv],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    return process, output


def _embed_until_writing(
    tmp_path: Path, bundle: Path, inputs, preexec_fn=default_sigint
) -> tuple[subprocess.Popen, Path]:
    """``psp embed`` of 300,000 lines, returned once its temporary output exists."""
    process, output = _embed_started(tmp_path, bundle, inputs, preexec_fn)
    deadline = time.monotonic() + 60
    while not any(".tmp-" in name for name in _names(output.parent)):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return process, output


def _names(folder: Path) -> list[str]:
    return listing(folder) if folder.is_dir() else []


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, rc, line",
    [
        (signal.SIGINT, 130, "psp: interrupted (Ctrl-C)"),
        (signal.SIGTERM, 143, "psp: stopped by SIGTERM"),
        (signal.SIGHUP, 129, "psp: stopped by SIGHUP"),
    ],
)
def test_a_stopped_embed_says_one_line_and_removes_its_temporary(
    tmp_path, bundle, inputs, sig, rc, line
):
    process, output = _embed_until_writing(tmp_path, bundle, inputs)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == rc, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == line, err
    assert [e for e in err.splitlines() if e.startswith("psp:")] == [line]
    assert not output.parent.exists()  # its temporary gone, and the folder made for it


def _wait_until_caught(process: subprocess.Popen, sig: signal.Signals, timeout: float = 60) -> None:
    """Wait until ``process`` has a handler for ``sig`` (its ``SigCgt`` mask in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
        except FileNotFoundError:
            return  # (ended already: the assertions say how)
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) >> (sig - 1) & 1:
            return
        time.sleep(0.002)
    raise AssertionError(f"psp did not catch {sig.name} within {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, after",
    [(signal.SIGTERM, 0.05), (signal.SIGTERM, 0.2), (signal.SIGTERM, 0.5), (signal.SIGTERM, 1.0)]
    + [(signal.SIGINT, 0.2), (signal.SIGHUP, 0.2)],
)
def test_a_stop_at_any_instant_from_start_up_on_is_one_line_and_leaves_nothing(
    tmp_path, bundle, inputs, sig, after
):
    """From the console script's first line: during the imports, the model's loading, the first
    write and the end (a signal during the interpreter's own start, before any of psp's code
    runs, ends it as the system's default does)."""
    process, output = _embed_started(tmp_path, bundle, inputs, default_sigint)
    # counted from the moment psp catches the signal: before that the interpreter is starting
    # (on a loaded machine that can take longer than the shortest wait here)
    _wait_until_caught(process, sig)
    time.sleep(after)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert process.returncode in (0, 128 + sig), err
    if process.returncode:
        line = {signal.SIGINT: "psp: interrupted (Ctrl-C)"}.get(sig, f"psp: stopped by {sig.name}")
        assert [e for e in err.splitlines() if e.startswith("psp:")] == [line], err
        assert err.strip().splitlines()[-1] == line, err  # (nothing after it)
    finished = "psp: wrote" in err  # (the output whole before the signal came)
    assert _names(output.parent) == (["vectors.npy"] if finished else []), err


@pytest.mark.slow
@pytest.mark.parametrize("after", [0.0, 0.05, 0.1, 0.2])
def test_a_stop_as_the_command_ends_leaves_its_whole_output_and_at_most_one_line(
    tmp_path, bundle, inputs, after
):
    """SIGTERM the moment ``psp embed`` says it wrote its output: what is left is the exit
    (the interpreter's teardown, where Python's own handlers are gone), so the output is whole
    and the process either ends as it would have or says its one line, never dies silently."""
    process, output = _embed_started(tmp_path, bundle, inputs)
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "psp: wrote" in line:
            time.sleep(after)
            process.send_signal(signal.SIGTERM)
            break
    rest = process.communicate(timeout=60)[1]
    err = "".join(seen) + rest
    assert process.returncode in (0, 143), err
    if process.returncode:
        assert err.strip().splitlines()[-1] == "psp: stopped by SIGTERM", err
    assert listing(output.parent) == ["vectors.npy"]
    assert np.load(output, mmap_mode="r").shape[0] == 300_000


def _hangup_ignored() -> None:
    default_sigint()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.slow
def test_an_embed_started_with_nohup_goes_on_through_a_hangup(tmp_path, bundle, inputs):
    process, output = _embed_until_writing(tmp_path, bundle, inputs, _hangup_ignored)
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert listing(output.parent) == ["vectors.npy"]
    assert np.load(output, mmap_mode="r").shape[0] == 300_000


@pytest.mark.slow
def test_an_embed_killed_with_sigkill_leaves_a_temporary_the_next_run_removes(
    tmp_path, bundle, inputs
):
    process, output = _embed_until_writing(tmp_path, bundle, inputs)
    process.kill()
    process.communicate(timeout=60)
    assert listing(output.parent) == [f".vectors.npy.tmp-{process.pid}"]
    completed = run_psp(command("embed", bundle, inputs, output))
    assert completed.returncode == 0, completed.stderr
    assert listing(output.parent) == ["vectors.npy"]


@pytest.mark.parametrize("name", ["embed", "score", "mine", "evaluate"])
def test_each_command_removes_what_killed_runs_of_its_output_left(
    tmp_path, bundle, inputs, capsys, name
):
    """The hidden file a killed writer left (``.out.tmp-PID``) and mine's work folder
    (``out.tmp-PID/``, two .npy files of vectors); a live writer's and other outputs' stay."""
    folder = tmp_path / "outputs"
    folder.mkdir()
    dead = killed_writer(folder, [".out.tmp-{pid}", "out.tmp-{pid}/", ".other.tmp-{pid}"])
    with live_writer(folder, [".out.tmp-{pid}"]) as alive:
        assert main(command(name, bundle, inputs, folder / "out")) == 0
        assert listing(folder) == sorted([f".other.tmp-{dead}", f".out.tmp-{alive}", "out"])
