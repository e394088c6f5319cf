"""The ``psp`` command line, driven in-process through ``main`` (and once as the console script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from psp_core.cli import main
from psp_core.inference.model import load_model
from psp_core.models.bundle import CONFIG_FILE, EMBEDDINGS_FILE, EMBEDDINGS_KEY, SPM_FILE
from tests.psp_core.cli_runs import command, run_main

PSP_SCRIPT = Path(sys.executable).with_name("psp")


@pytest.fixture()
def sentences(toy) -> list[str]:
    lines = [s for pair in toy.pairs(30, seed=4) for s in pair]
    lines[3:3] = ["", "   ", "ÄÖÜ ß naïve café"]  # empty, no pieces, non-ASCII
    return lines


@pytest.fixture()
def sentence_file(tmp_path, sentences) -> Path:
    path = tmp_path / "input" / "sentences.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def pairs(toy) -> list[tuple[str, str]]:
    result = toy.pairs(25, seed=8)
    result += [(a, b) for (a, _), (_, b) in zip(result[:10], result[1:11], strict=True)]
    result += [("", result[0][1]), ("   ", "")]
    return result


@pytest.fixture()
def pair_file(tmp_path, pairs) -> Path:
    path = tmp_path / "input" / "pairs.tsv"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    return path


def parse_scores(text: str) -> tuple[list[tuple[str, str]], np.ndarray]:
    rows = [line.split("\t") for line in text.splitlines()]
    assert all(len(row) == 3 for row in rows), rows
    return [(a, b) for a, b, _ in rows], np.array([float(s) for _, _, s in rows])


def assert_cli_error(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "psp: error:" in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    return err


# --- embed ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize", [False, True])
def test_embed_writes_what_the_model_computes(
    tmp_path, bundle, sentence_file, sentences, normalize
):
    output = tmp_path / "out" / "vectors.npy"
    argv = ["embed", "--sentence-file", str(sentence_file), "--model", str(bundle)]
    argv += ["--output-file", str(output), "--batch-size", "5"]
    if normalize:
        argv.append("--normalize")

    assert main(argv) == 0

    vectors = np.load(output)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(sentences), 16)
    expected = load_model(bundle).embed(sentences, normalize=normalize)
    np.testing.assert_allclose(vectors, expected, rtol=1e-6, atol=1e-7)
    assert [p.name for p in output.parent.iterdir()] == ["vectors.npy"]


def test_embed_with_workers_writes_the_same_vectors(tmp_path, bundle, toy, monkeypatch):
    from psp_core.inference.fast import multiprocess_embed

    if not multiprocess_embed.can_fork():
        pytest.skip("workers fork: Linux only")
    monkeypatch.setattr(multiprocess_embed, "MIN_SENTENCES_PER_WORKER", 100)
    sentences = [left for left, _ in toy.pairs(1000, seed=3)]
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.npy"
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle), "--workers", "3"]
    assert main(argv + ["--output-file", str(output)]) == 0
    expected = load_model(bundle).embed(sentences)
    np.testing.assert_allclose(np.load(output), expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(SystemExit):
        main(argv[:-1] + ["0", "--output-file", str(tmp_path / "other.npy")])


def test_embed_handles_crlf_and_a_missing_final_newline(tmp_path, bundle, sentences):
    source = tmp_path / "crlf.txt"
    source.write_bytes("\r\n".join(sentences).encode("utf-8"))
    output = tmp_path / "vectors.npy"
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle)]
    assert main(argv + ["--output-file", str(output)]) == 0
    np.testing.assert_allclose(np.load(output), load_model(bundle).embed(sentences), atol=1e-7)


def test_embed_of_an_empty_file_gives_an_empty_array(tmp_path, bundle):
    source = tmp_path / "empty.txt"
    source.write_bytes(b"")
    output = tmp_path / "vectors.npy"
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle)]
    assert main(argv + ["--output-file", str(output)]) == 0
    vectors = np.load(output)
    assert vectors.shape == (0, 16)
    assert vectors.dtype == np.float32


# --- score ----------------------------------------------------------------------------------------


def test_score_to_a_file_matches_model_score(tmp_path, bundle, pair_file, pairs):
    output = tmp_path / "out" / "scores.tsv"
    argv = ["score", "--sentence-pair-file", str(pair_file), "--model", str(bundle)]

    assert main(argv + ["--output-file", str(output), "--batch-size", "4"]) == 0

    written_pairs, scores = parse_scores(output.read_text(encoding="utf-8"))
    assert written_pairs == pairs
    np.testing.assert_allclose(scores, load_model(bundle).score(pairs), atol=2e-6)
    assert scores[-2:].tolist() == [0.0, 0.0]
    assert [p.name for p in output.parent.iterdir()] == ["scores.tsv"]


def test_score_without_output_file_prints_the_same_lines(tmp_path, bundle, pair_file, capsys):
    output = tmp_path / "scores.tsv"
    argv = ["score", "--sentence-pair-file", str(pair_file), "--model", str(bundle)]
    assert main(argv + ["--output-file", str(output)]) == 0
    capsys.readouterr()

    assert main(argv) == 0

    assert capsys.readouterr().out == output.read_text(encoding="utf-8")


# --- info -----------------------------------------------------------------------------------------


def test_info_prints_json_describing_the_bundle(bundle, model, capsys):
    assert main(["info", str(bundle)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dim"] == 16
    assert summary["vocab_size"] == model.vocab_size
    assert summary["spm_sha256"] == model.tokenizer.sha256
    assert summary["path"] == str(bundle.resolve())
    assert summary["checksums_verified"] is True
    assert set(summary["files"]) == {EMBEDDINGS_FILE, SPM_FILE}


def test_info_says_when_an_old_bundle_has_no_checksums(bundle, capsys):
    config = json.loads((bundle / CONFIG_FILE).read_text())
    del config["files"]
    (bundle / CONFIG_FILE).write_text(json.dumps(config))
    assert main(["info", str(bundle)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["checksums_verified"] is False
    assert summary["files"] == {}


# --- train ----------------------------------------------------------------------------------------


TRAIN_ARGS = ["--dim", "16", "--epochs", "1", "--max-megabatch", "2", "--anneal-every", "0"]
TRAIN_ARGS += ["--batch-size", "32", "--device", "cpu"]


def write_sts_file(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """Translations get gold 5, mismatched sentences gold 0."""
    lines = [f"5.0\t{a}\t{b}" for a, b in pairs]
    lines += [f"0.0\t{a}\t{b}" for (a, _), (_, b) in zip(pairs, pairs[1:] + pairs[:1], strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("with_dev", [False, True], ids=["no-dev", "dev-sts"])
def test_train_produces_a_loadable_bundle(
    tmp_path, toy_training_file, spm_path, toy, capsys, with_dev
):
    output = tmp_path / "trained"
    argv = ["train", "--data", str(toy_training_file), "--spm", str(spm_path)]
    argv += ["--output", str(output), *TRAIN_ARGS]
    if with_dev:
        argv += ["--dev-sts", str(write_sts_file(tmp_path / "dev.tsv", toy.pairs(20, seed=77)))]

    assert main(argv) == 0

    report = json.loads(capsys.readouterr().out)
    assert Path(report["bundle"]) == output
    [epoch] = report["history"]
    assert epoch["epoch"] == 0 and epoch["steps"] > 0 and np.isfinite(epoch["loss"])
    if with_dev:
        assert -100.0 <= epoch["dev_score"] <= 100.0
    else:
        assert "dev_score" not in epoch
    trained = load_model(output)
    assert trained.dim == 16
    assert trained.config.languages == ["en", "xx"]
    assert trained.config.training["config"]["batch_size"] == 32
    vectors = trained.embed([toy.pairs(1)[0][0]], normalize=True)
    np.testing.assert_allclose(np.linalg.norm(vectors), 1.0, rtol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("trained")) == [
        "trained"
    ]  # the checkpoint directory is removed after success


def test_train_reports_a_missing_training_file(tmp_path, spm_path, capsys):
    missing = tmp_path / "nope.h5"
    argv = ["train", "--data", str(missing), "--spm", str(spm_path)]
    assert_cli_error(capsys, argv + ["--output", str(tmp_path / "m"), *TRAIN_ARGS], str(missing))


# --- errors ---------------------------------------------------------------------------------------


def test_missing_sentence_file(tmp_path, bundle, capsys):
    missing = tmp_path / "absent.txt"
    argv = ["embed", "--sentence-file", str(missing), "--model", str(bundle)]
    assert_cli_error(
        capsys, argv + ["--output-file", str(tmp_path / "x.npy")], str(missing), "does not exist"
    )
    assert not (tmp_path / "x.npy").exists()


def test_missing_pair_file(tmp_path, bundle, capsys):
    missing = tmp_path / "absent.tsv"
    argv = ["score", "--sentence-pair-file", str(missing), "--model", str(bundle)]
    assert_cli_error(capsys, argv, str(missing), "does not exist")


@pytest.mark.parametrize("command", ["embed", "score", "info"])
def test_missing_model_directory(tmp_path, sentence_file, command, capsys):
    missing = tmp_path / "no-model"
    argv = {
        "embed": ["embed", "--sentence-file", str(sentence_file), "--model", str(missing)]
        + ["--output-file", str(tmp_path / "x.npy")],
        "score": ["score", "--sentence-pair-file", str(sentence_file), "--model", str(missing)],
        "info": ["info", str(missing)],
    }[command]
    assert_cli_error(capsys, argv, str(missing), "not a directory")


def test_pair_line_without_a_tab_names_the_line(tmp_path, bundle, capsys):
    source = tmp_path / "pairs.tsv"
    source.write_text("a b\tc d\ne f\tg h\nno tab on this line\ni j\tk l\n", encoding="utf-8")
    output = tmp_path / "out" / "scores.tsv"
    argv = ["score", "--sentence-pair-file", str(source), "--model", str(bundle)]
    assert_cli_error(capsys, argv + ["--output-file", str(output)], f"{source}:3:", "no tab")
    assert not output.parent.exists() or list(output.parent.iterdir()) == []


def test_pair_line_with_extra_fields_is_refused(tmp_path, bundle, capsys):
    source = tmp_path / "pairs.tsv"
    source.write_text("a b\tc d\n4.5\te f\tg h\n", encoding="utf-8")
    argv = ["score", "--sentence-pair-file", str(source), "--model", str(bundle)]
    assert_cli_error(capsys, argv, f"{source}:2:", "3 tab-separated fields")


@pytest.mark.parametrize("command", ["embed", "score"])
def test_invalid_utf8_names_the_line(tmp_path, bundle, capsys, command):
    source = tmp_path / "bad.txt"
    source.write_bytes(b"good line\tfine\n" + b"bad \xff\xfe line\tx\n" + b"after\ty\n")
    output_dir = tmp_path / "out"
    if command == "embed":
        argv = ["embed", "--sentence-file", str(source), "--model", str(bundle)]
        argv += ["--output-file", str(output_dir / "x.npy")]
    else:
        argv = ["score", "--sentence-pair-file", str(source), "--model", str(bundle)]
        argv += ["--output-file", str(output_dir / "scores.tsv")]
    assert_cli_error(capsys, argv, f"{source}:2:", "not valid UTF-8")
    assert not output_dir.exists() or list(output_dir.iterdir()) == []


@pytest.mark.parametrize("command", ["embed", "score", "info"])
def test_tampered_bundle_is_a_clear_error(
    tmp_path, bundle, model, sentence_file, pair_file, command, capsys
):
    table = model.weight.numpy()[:, :-1].copy()
    save_file({EMBEDDINGS_KEY: table}, str(bundle / EMBEDDINGS_FILE))
    argv = {
        "embed": ["embed", "--sentence-file", str(sentence_file), "--model", str(bundle)]
        + ["--output-file", str(tmp_path / "x.npy")],
        "score": ["score", "--sentence-pair-file", str(pair_file), "--model", str(bundle)],
        "info": ["info", str(bundle)],
    }[command]
    assert_cli_error(capsys, argv, str(bundle / EMBEDDINGS_FILE), "does not match config.json")
    assert not (tmp_path / "x.npy").exists()


def test_embed_failure_after_start_leaves_no_temporary_file(
    tmp_path, bundle, sentence_file, capsys
):
    output = tmp_path / "out" / "vectors.npy"
    argv = ["embed", "--sentence-file", str(sentence_file), "--model", str(bundle)]
    argv += ["--output-file", str(output), "--batch-size", "0"]
    assert_cli_error(capsys, argv, "batch_size must be >= 1")
    assert not output.parent.exists()  # made for the output, taken back with it


# --- the installed console script -----------------------------------------------------------------


@pytest.mark.slow
def test_console_script_embeds_and_reports_errors(tmp_path, bundle, sentence_file, sentences):
    assert PSP_SCRIPT.is_file(), f"{PSP_SCRIPT} is missing: is the project installed?"
    output = tmp_path / "vectors.npy"
    completed = subprocess.run(
        [str(PSP_SCRIPT), "embed", "--sentence-file", str(sentence_file), "--model", str(bundle)]
        + ["--output-file", str(output), "--normalize"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    expected = load_model(bundle).embed(sentences, normalize=True)
    np.testing.assert_allclose(np.load(output), expected, rtol=1e-6, atol=1e-7)

    missing = tmp_path / "no-model"
    failed = subprocess.run(
        [str(PSP_SCRIPT), "info", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 2
    assert f"psp: error: model bundle {missing} is not a directory" in failed.stderr


@pytest.mark.slow
def test_embed_reads_standard_input(tmp_path, bundle, sentence_file, sentences):
    """``--sentence-file -``: the same vectors as from the file; the spooled copy beside the
    output is removed; invalid UTF-8 names standard input and its line."""
    output = tmp_path / "out" / "vectors.npy"
    argv = [str(PSP_SCRIPT), "embed", "--sentence-file", "-", "--model", str(bundle)]
    argv += ["--output-file", str(output)]
    with open(sentence_file, "rb") as stdin:
        completed = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    expected = load_model(bundle).embed(sentences)
    np.testing.assert_allclose(np.load(output), expected, rtol=1e-6, atol=1e-7)
    assert [p.name for p in output.parent.iterdir()] == ["vectors.npy"]

    bad = subprocess.run(argv, input=b"fine\n\xff broken\n", capture_output=True, timeout=120)
    assert bad.returncode == 2
    assert b"psp: error: standard input:2: not valid UTF-8" in bad.stderr
    assert [p.name for p in output.parent.iterdir()] == ["vectors.npy"]  # the old one, whole


# --- numbers a command cannot run with --------------------------------------------------------


@pytest.mark.parametrize(
    "name, flag, value, message",
    [
        ("train", "--max-steps", "0", "must be at least 1, got 0"),
        ("train", "--max-steps", "-1", "must be at least 1, got -1"),
        ("train", "--lr", "nan", "must be a finite number, got nan"),
        ("train", "--margin", "inf", "must be a finite number, got inf"),
        ("mine", "--threshold", "nan", "must be a finite number, got nan"),
        ("mine", "--threshold", "-inf", "must be a finite number, got -inf"),
        # as a careless or hostile user writes them: spellings Python reads as NaN or infinity
        ("mine", "--threshold", "NaN", "must be a finite number, got NaN"),
        ("train", "--lr", "Infinity", "must be a finite number, got Infinity"),
        ("train", "--lr", "1e999", "must be a finite number, got 1e999"),
        ("train", "--max-steps", "1.5", "expected a whole number, got '1.5'"),
    ],
)
def test_a_number_a_command_cannot_run_with_is_a_usage_error(
    tmp_path, bundle, inputs, train_inputs, capsys, name, flag, value, message
):
    """``psp train --max-steps 0`` wrote a bundle of untrained random weights and exited 0;
    ``psp mine --threshold nan`` kept no pair and exited 0. Now: exit 2, the flag named, no
    output."""
    output = tmp_path / "out" / ("model" if name == "train" else "pairs.tsv")
    argv = command(name, bundle, {**inputs, **train_inputs}, output) + [f"{flag}={value}"]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert f"argument {flag}: {message}" in capsys.readouterr().err
    assert not output.parent.exists()


@pytest.mark.parametrize("command_name", [["models", "list", "de"], ["serve"]])
@pytest.mark.parametrize("given_by", ["environment", "flag"])
@pytest.mark.parametrize("kind", ["file", "link to a file", "fifo"])
def test_a_storage_root_that_is_a_file_is_named_with_where_it_came_from(
    tmp_path, capsys, monkeypatch, command_name, given_by, kind
):
    """It said "no model versions there (materialize psp_model first)", sending the user to
    train a model they had. A link to a file and a FIFO are no folder either."""
    if command_name == ["serve"]:
        pytest.importorskip("starlette", reason="psp serve needs the [serve] extra")
    root = tmp_path / "not-a-folder"
    if kind == "fifo":
        os.mkfifo(root)
    else:
        target = tmp_path / "a-file"
        target.write_text("a file")
        if kind == "link to a file":
            root.symlink_to(target)
        else:
            target.rename(root)
    if given_by == "environment":
        monkeypatch.setenv("PSP_STORAGE_ROOT", str(root))
        argv, source = command_name, "$PSP_STORAGE_ROOT"
    else:
        argv, source = command_name + ["--storage-root", str(root)], "--storage-root"
    run_main(capsys, argv, f"the storage root {root} (from {source}) is not a folder")
