"""``psp evaluate`` and ``psp mine``, in-process through ``main`` and once as ``python -m``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from psp_core.bitext_mining import mine
from psp_core.cli import main
from psp_core.evaluation import evaluate_model
from psp_core.inference.model import load_model
from tests.psp_core.cli_runs import run_psp

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def eval_dir(tmp_path, toy) -> Path:
    pairs = toy.pairs(30, seed=12)
    root = tmp_path / "eval"
    lines = [
        f"{5.0 if i % 2 else 1.0}\t{a}\t{b if i % 2 else pairs[-i][1]}"
        for i, (a, b) in enumerate(pairs)
    ]
    for path in (root / "sts" / "2014" / "images.tsv", root / "sts17" / "en-en.tsv"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "tatoeba").mkdir()
    (root / "tatoeba" / "xyz-eng.xyz").write_text("".join(f"{b}\n" for _, b in pairs))
    (root / "tatoeba" / "xyz-eng.eng").write_text("".join(f"{a}\n" for a, _ in pairs))
    return root


@pytest.fixture()
def mining_files(tmp_path, toy) -> tuple[Path, Path]:
    sentences = list(dict.fromkeys(a for a, _ in toy.pairs(40, seed=13)))
    rng = np.random.default_rng(0)
    source, target = tmp_path / "src.txt", tmp_path / "tgt.txt"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    target.write_text("\n".join(sentences[i] for i in rng.permutation(len(sentences))) + "\n")
    return source, target


def test_evaluate_prints_tables_and_writes_json(bundle, eval_dir, tmp_path, capsys):
    output = tmp_path / "out" / "results.json"
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(eval_dir)]
    argv += ["--suites", "sts,sts17,tatoeba,speed", "--speed-repeats", "1"]
    assert main(argv + ["--output-json", str(output)]) == 0

    printed = capsys.readouterr().out
    data = json.loads(output.read_text())
    expected = evaluate_model(load_model(bundle), eval_dir, ["sts", "sts17", "tatoeba"])
    assert data["sts"]["datasets"]["2014"]["images"]["pearson"] == pytest.approx(
        expected.sts["2014"]["images"].pearson, abs=1e-5
    )
    assert data["sts17"]["en-en"]["spearman"] == pytest.approx(
        expected.sts17["en-en"].spearman, abs=1e-5
    )
    assert data["tatoeba"]["xyz"] == pytest.approx(expected.tatoeba["xyz"].as_dict())
    assert data["speed"]["sentences"] == 120  # both sides of the two STS files
    assert "STS 2012 MSRpar" in data["missing"] and "STSB dev" not in data["missing"]
    assert "| **2014 mean** [1] |" in printed and "| xyz | 30 |" in printed
    assert "with tokenization" in printed and "Missing (skipped)" in printed
    assert [p.name for p in output.parent.iterdir()] == ["results.json"]


def test_evaluate_says_when_the_model_was_selected_on_an_unnamed_dev_file(
    tmp_path, model, eval_dir, capsys
):
    """A bundle trained with model selection (a best epoch in its training summary): psp
    evaluate cannot tell which row was the dev set, and says so in the tables and the JSON."""
    model.config.training = {"best_epoch": 2, "best_score": 55.0}
    bundle = model.save(tmp_path / "selected")
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(eval_dir)]
    assert main(argv + ["--suites", "sts,sts17", "--output-json", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "selected on a dev STS file that this evaluation was not told about" in printed
    data = json.loads(output.read_text())
    assert data["dev_unnamed"] is True and data["dev_sts"] is None
    assert data["sts17"]["en-en"]["dev"] is False


def test_evaluate_dev_sts_marks_the_dev_row_and_leaves_it_out_of_the_means(
    tmp_path, model, eval_dir, capsys
):
    model.config.training = {"best_epoch": 2, "best_score": 55.0}
    bundle = model.save(tmp_path / "selected")
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(eval_dir), "--suites"]
    argv += ["sts,sts17", "--output-json", str(output), "--dev-sts", "sts17/en-en.tsv"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| en-en (dev) |" in printed
    data = json.loads(output.read_text())
    assert data["dev_unnamed"] is False and data["sts17"]["en-en"]["dev"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--suites", "sts,glue"], "--suites 'sts,glue'"),
        (["--suites", ""], "expected a comma-separated subset"),
    ],
)
def test_evaluate_refuses_unknown_suites(bundle, eval_dir, capsys, extra, message):
    argv = ["evaluate", "--model", str(bundle), "--eval-dir", str(eval_dir), *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_evaluate_names_a_missing_eval_dir(bundle, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["evaluate", "--model", str(bundle), "--eval-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"psp: error: evaluation directory {missing} does not exist" in err


@pytest.mark.parametrize("mode", ["forward", "backward", "intersection"])
def test_mine_writes_sorted_pairs(bundle, mining_files, tmp_path, mode):
    source, target = mining_files
    output = tmp_path / "mined" / "pairs.tsv"
    argv = ["mine", "--model", str(bundle), "--source-file", str(source)]
    argv += ["--target-file", str(target), "--output-file", str(output), "--mode", mode]
    argv += ["--k", "3", "--block-size", "8"]
    assert main(argv) == 0

    rows = [line.split("\t") for line in output.read_text(encoding="utf-8").splitlines()]
    model = load_model(bundle)
    sources = source.read_text().splitlines()
    targets = target.read_text().splitlines()
    expected = mine(
        model.embed(sources, normalize=True), model.embed(targets, normalize=True), k=3, mode=mode
    )
    assert len(rows) == len(expected) == len(sources)
    assert [(a, b) for _, a, b in rows] == [
        (sources[i], targets[j])
        for i, j in zip(expected.source_indices, expected.target_indices, strict=True)
    ]
    assert all(a == b for _, a, b in rows)  # identical sentences find each other
    np.testing.assert_allclose([float(s) for s, _, _ in rows], expected.scores, atol=1e-5)


@pytest.mark.slow
def test_mine_prints_no_library_warning(bundle, mining_files, tmp_path):
    """In a fresh process (torch says its warning once a process): the read-only vectors
    once made torch warn "The given NumPy array is not writable" on every psp mine."""
    source, target = mining_files
    output = tmp_path / "pairs.tsv"
    argv = ["mine", "--model", str(bundle), "--source-file", str(source)]
    completed = run_psp(argv + ["--target-file", str(target), "--output-file", str(output)])
    assert completed.returncode == 0, completed.stderr
    assert "Warning" not in completed.stderr, completed.stderr
    assert output.read_text().count("\n") > 0


def test_mine_threshold_and_errors(bundle, mining_files, tmp_path, capsys):
    source, target = mining_files
    output = tmp_path / "pairs.tsv"
    argv = ["mine", "--model", str(bundle), "--source-file", str(source)]
    argv += ["--target-file", str(target), "--output-file", str(output)]
    assert main(argv + ["--threshold", "100"]) == 0
    assert output.read_text() == ""
    missing = tmp_path / "absent.txt"
    bad = ["mine", "--model", str(bundle), "--source-file", str(missing)]
    bad += ["--target-file", str(target), "--output-file", str(output)]
    assert main(bad) == 2
    assert f"source file {missing} does not exist" in capsys.readouterr().err
    assert main(argv + ["--k", "0"]) == 2
    assert "--k must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_python_dash_m_runs_the_worktree_cli(bundle, mining_files, tmp_path):
    source, target = mining_files
    output = tmp_path / "pairs.tsv"
    completed = subprocess.run(
        [sys.executable, "-m", "psp_core.cli", "mine", "--model", str(bundle)]
        + [
            "--source-file",
            str(source),
            "--target-file",
            str(target),
            "--output-file",
            str(output),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert len(output.read_text().splitlines()) == len(source.read_text().splitlines())
