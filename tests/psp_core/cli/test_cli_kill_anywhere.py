"""``kill -9`` of ``psp export`` (both formats), ``psp embed`` and ``psp train``, at random moments
and at the moment an output folder is swapped in: the output is the old one or the new one,
whole, and after the next run (the same command, to completion) it is the new one and no
temporary is left beside it.

The swap moments are reached by a driver that runs ``psp_core.cli.main.main`` with
``psp_core.files.output_dirs`` patched to print ``paused`` and sleep at that point (before the names
are exchanged, after, and between the two renames used where a file system cannot exchange
names); the test kills it there."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from psp_core.cli import main
from psp_core.files.stale_temps import remove_stale_temps_beside
from psp_core.models.bundle import load_bundle
from tests.psp_core.cli_runs import command, run_psp, tree
from tests.psp_core.filesystems import listing

_DRIVER = """
import os, sys, time
import psp_core.files.output_dirs as output_dirs

point, argv = sys.argv[1], sys.argv[2:]
real_exchange = output_dirs.exchange_names


def pause():
    print("paused", flush=True)
    time.sleep(600)


def exchange_before(first, second):
    pause()
    return real_exchange(first, second)


def exchange_after(first, second):
    exchanged = real_exchange(first, second)
    if exchanged:
        pause()
    return exchanged


class PausingOs:  # the two-rename fallback, paused after the old folder was moved aside
    def __getattr__(self, name):
        return getattr(os, name)

    def rename(self, source, target):
        os.rename(source, target)
        if str(target).endswith(f".old-{os.getpid()}"):
            pause()


if point == "before-swap":
    output_dirs.exchange_names = exchange_before
elif point == "after-swap":
    output_dirs.exchange_names = exchange_after
elif point == "between-renames":
    output_dirs.exchange_names = lambda first, second: False
    output_dirs.os = PausingOs()

from psp_core.cli import main

sys.exit(main(argv))
"""

SWAP_POINTS = ["before-swap", "after-swap", "between-renames"]


def kill_at_swap(argv: list[str], point: str) -> None:
    """Run ``psp argv`` until it reaches ``point``, then SIGKILL it (``Popen.kill``)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, point, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:
            if line.strip() == "paused":
                break
        else:
            raise AssertionError(f"never reached {point}: {process.communicate()}")
    finally:
        process.kill()
        process.communicate(timeout=60)


def kill_after(argv: list[str], seconds: float) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, "none", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
    process.communicate(timeout=60)


def run_here(argv: list[str]) -> None:
    assert main(argv) == 0


def timed_run(argv: list[str]) -> float:
    started = time.monotonic()
    completed = run_psp(argv)
    assert completed.returncode == 0, completed.stderr
    return time.monotonic() - started


def check_kills(
    argv: list[str],
    output: Path,
    old: dict[str, bytes],
    new: dict[str, bytes],
    points: list[str],
    random_kills: int,
    seconds: float | None,
    *,
    whole=None,
) -> None:
    """Kill ``psp argv`` at each of ``points`` and at ``random_kills`` random moments within
    ``seconds``, starting each time from the old output: after each kill the output is the old
    or the new one, whole (``whole(output)`` where new outputs differ run to run); after the
    next run (``main(argv)`` in this process) it is new and nothing else is left beside it."""
    rng = random.Random(30)
    moments = [*points, *(round(rng.uniform(0.3, seconds), 2) for _ in range(random_kills))]
    for moment in moments:
        restore(output, old)
        if isinstance(moment, str):
            kill_at_swap(argv, moment)
        else:
            kill_after(argv, moment)
        if moment == "between-renames":
            assert not output.exists()  # the one instant without exchange: repaired by a rerun
            remove_stale_temps_beside(output)
        seen = tree(output)
        if whole is None:
            assert seen in (old, new), f"after a kill at {moment}: neither old nor new"
        else:
            assert seen == old or whole(output), f"after a kill at {moment}: not whole"
        run_here(argv)  # in this process: the same code as the command, without its start-up
        if whole is None:
            assert tree(output) == new, f"the run after a kill at {moment}"
        else:
            assert tree(output) != old and whole(output)
        assert listing(output.parent) == [output.name], (moment, listing(output.parent))


def restore(output: Path, content: dict[str, bytes]) -> None:
    if output.is_dir():
        shutil.rmtree(output)
    elif output.exists():
        output.unlink()
    if list(content) == [""]:
        output.write_bytes(content[""])
        return
    for name, data in content.items():
        (output / name).parent.mkdir(parents=True, exist_ok=True)
        (output / name).write_bytes(data)


@pytest.fixture()
def two_bundles(tmp_path, model) -> tuple[Path, Path]:
    """Two bundles of the same tokenizer with different vectors: the old and the new model."""
    first = model.save(tmp_path / "models" / "old")
    with torch.no_grad():
        model.weight.mul_(-2.0)
    return first, model.save(tmp_path / "models" / "new")


@pytest.mark.slow
@pytest.mark.parametrize(
    "format, points, random_kills",
    [("model2vec", SWAP_POINTS, 2), ("sentence-transformers", ["after-swap"], 0)],
)
def test_export_killed_anywhere(tmp_path, two_bundles, format, points, random_kills):
    pytest.importorskip(format.replace("-", "_"))
    old_bundle, new_bundle = two_bundles
    output = tmp_path / "exports" / "model"
    export = ["export", "--format", format, "--output", str(output), "--model"]
    run_here([*export, str(old_bundle)])
    old = tree(output)
    argv = [*export, str(new_bundle)]
    seconds = timed_run(argv) if random_kills else run_here(argv)
    new = tree(output)
    assert old != new
    check_kills(argv, output, old, new, points, random_kills, seconds)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_embed_killed_anywhere(tmp_path, two_bundles, inputs, suffix):
    old_bundle, new_bundle = two_bundles
    big = tmp_path / "big.txt"
    big.write_text(inputs["sentences"].read_text() * 2000)  # 160,000 lines
    output = tmp_path / "vectors" / f"big{suffix}"
    run_here(command("embed", old_bundle, inputs, output, sentences=big))
    old = tree(output)
    argv = command("embed", new_bundle, inputs, output, sentences=big)
    seconds = timed_run(argv)
    new = tree(output)
    check_kills(argv, output, old, new, [], 3, seconds)


@pytest.mark.slow
def test_train_killed_anywhere(tmp_path, train_inputs):
    output = tmp_path / "bundles" / "model"
    argv = command("train", None, train_inputs, output)
    argv[argv.index("--epochs") + 1] = "2"
    run_here([*argv, "--lr", "0.5"])
    old = tree(output)
    seconds = timed_run(argv)

    def whole(bundle: Path) -> bool:
        load_bundle(bundle)  # every file's recorded size and checksum: no mix of two bundles
        return True

    check_kills(argv, output, old, {}, ["after-swap", "between-renames"], 1, seconds, whole=whole)
