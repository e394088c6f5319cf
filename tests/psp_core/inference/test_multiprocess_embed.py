"""``embed`` with worker processes (psp_core/inference/fast/multiprocess_embed.py): the same vectors as one
process, the caller's memory and children left as they were, and failures that leave nothing
running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from psp_core import load_model
from psp_core.inference.fast import multiprocess_embed
from psp_core.inference.fast.multiprocess_embed import WorkerFailed, embed_forked

pytestmark = pytest.mark.skipif(
    not multiprocess_embed.can_fork(), reason="workers fork: Linux only"
)


@pytest.fixture()
def small_shares(monkeypatch):
    """Shares of a few hundred sentences, so that a test's input is split without being big."""
    monkeypatch.setattr(multiprocess_embed, "MIN_SENTENCES_PER_WORKER", 200)


def _sentences(toy, count: int) -> list[str]:
    return [left for left, _ in toy.pairs(count, seed=5)]


def test_workers_give_the_vectors_of_one_process(bundle, toy, small_shares):
    sentences = _sentences(toy, 3000)
    one = load_model(bundle).embed(sentences)
    model = load_model(bundle, workers=3)
    many = model.embed(sentences)
    np.testing.assert_allclose(many, one, rtol=1e-6, atol=1e-7)
    # into a caller's buffer, normalized and truncated: the same as one process too
    out = np.full((len(sentences), model.dim), np.nan, dtype=np.float32)
    got = model.embed(sentences, out=out, normalize=True, dim=8)
    expected = load_model(bundle).embed(sentences, normalize=True, dim=8)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert not np.isnan(out).any()


def test_small_inputs_stay_in_one_process(bundle, toy):
    model = load_model(bundle, workers=4)
    assert multiprocess_embed.workers_for(100, 4) == 1
    assert multiprocess_embed.workers_for(3 * multiprocess_embed.MIN_SENTENCES_PER_WORKER, 4) == 3
    before = _children()
    model.embed(_sentences(toy, 100))
    assert _children() == before


def _children() -> set[int]:
    psutil = pytest.importorskip("psutil")  # (the cluster extra, which make install includes)
    return {child.pid for child in psutil.Process().children()}


def test_progress_counts_every_worker(small_shares):
    sentences = [f"s{i}" for i in range(1000)]
    reported = []

    def embed_into(texts, out, done):
        for start in range(0, len(texts), 100):
            out[start : start + 100] = [[len(t), 1.0] for t in texts[start : start + 100]]
            done(len(texts[start : start + 100]))
            time.sleep(0.01)

    result = embed_forked(sentences, None, 2, 2, embed_into, reported.append, threading.Lock())
    assert sum(reported) == len(sentences)
    np.testing.assert_array_equal(result[:, 0], [len(s) for s in sentences])


def test_the_callers_buffer_is_inherited_by_its_own_forks_afterwards(small_shares):
    """The buffer's pages are left out of the workers' fork only while it runs: a fork the
    caller makes later still sees them (a child reading them would crash otherwise)."""
    out = np.zeros((4096, 2), dtype=np.float32)

    def embed_into(texts, into, done):
        into[:] = 7.0
        done(len(texts))

    embed_forked([""] * len(out), out, 2, 2, embed_into, lambda k: None, threading.Lock())
    assert (out == 7.0).all()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if float(out.sum()) == 7.0 * out.size else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_failing_worker_fails_the_call_and_leaves_no_process(small_shares):
    parent = os.getpid()

    def embed_into(texts, out, done):
        if os.getpid() != parent:
            raise RuntimeError("this worker breaks")
        time.sleep(0.5)
        out[:] = 0

    before = _children()
    with pytest.raises(WorkerFailed, match="exited with status 1"):
        embed_forked(["x"] * 900, None, 4, 3, embed_into, lambda k: None, threading.Lock())
    assert _children() == before


def test_a_failing_parent_kills_its_workers(small_shares):
    parent = os.getpid()

    def embed_into(texts, out, done):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        time.sleep(60)

    before = _children()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        embed_forked(["x"] * 900, None, 4, 3, embed_into, lambda k: None, threading.Lock())
    assert time.monotonic() - started < 10
    assert _children() == before


def test_the_callers_own_children_are_not_reaped(small_shares):
    own = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(5)"])

    def embed_into(texts, out, done):
        time.sleep(0.6)
        out[:] = 1

    embed_forked(["x"] * 900, None, 4, 2, embed_into, lambda k: None, threading.Lock())
    assert own.wait(timeout=10) == 5


def test_workers_die_with_a_parent_killed_hard(tmp_path: Path):
    """``kill -9`` of the embedding process leaves none of its workers running."""
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import os, threading, time
        from psp_core.inference.fast import multiprocess_embed
        multiprocess_embed.MIN_SENTENCES_PER_WORKER = 10

        def embed_into(texts, out, done):
            with open({str(pids)!r}, "a") as handle:
                handle.write(f"{{os.getpid()}}\\n")
            time.sleep(120)

        multiprocess_embed.embed_forked(["x"] * 40, None, 2, 3, embed_into, lambda k: None,
                                   threading.Lock())
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[3])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 3):
        time.sleep(0.05)
    workers = [int(p) for p in pids.read_text().split() if int(p) != process.pid]
    assert len(workers) == 2
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    psutil = pytest.importorskip("psutil")
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_new_output_behaves_as_private_memory(bundle, toy, small_shares):
    """The children's rows reach the caller through a private mapping of their file: a fork of
    the caller's that writes to the array changes nothing for the caller, and the caller's
    own writes stick."""
    sentences = _sentences(toy, 3000)
    expected = load_model(bundle).embed(sentences)
    vectors = load_model(bundle, workers=2).embed(sentences)
    np.testing.assert_array_equal(vectors, expected)
    pid = os.fork()
    if pid == 0:
        vectors[:] = 0
        os._exit(0)
    os.waitpid(pid, 0)
    np.testing.assert_array_equal(vectors, expected)
    vectors[-1] = 3.0
    assert (vectors[-1] == 3.0).all() and (vectors[:-1] == expected[:-1]).all()


def _worker_pids_then(signal_worker, tmp_path: Path):
    """Run ``embed_forked`` (2 children) whose children note their pid and take a while; call
    ``signal_worker(pid)`` on the first child seen, from a thread; return the call's result or
    exception."""
    parent = os.getpid()
    pids = tmp_path / "pids"

    def embed_into(texts, out, done):
        if os.getpid() != parent:
            with open(pids, "a") as handle:
                handle.write(f"{os.getpid()}\n")
        for start in range(0, len(texts), 50):
            time.sleep(0.05)
            out[start : start + 50] = 1.0
            done(len(texts[start : start + 50]))

    def signaller():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (pids.exists() and pids.read_text().strip()):
            time.sleep(0.01)
        signal_worker(int(pids.read_text().split()[0]))

    thread = threading.Thread(target=signaller)
    thread.start()
    try:
        return embed_forked(["x"] * 900, None, 2, 3, embed_into, lambda k: None, threading.Lock())
    except WorkerFailed as error:
        return error
    finally:
        thread.join()


def test_a_worker_killed_hard_fails_the_call_and_leaves_no_process(tmp_path, small_shares):
    before = _children()
    result = _worker_pids_then(lambda pid: os.kill(pid, signal.SIGKILL), tmp_path)
    assert isinstance(result, WorkerFailed) and "killed by signal 9" in str(result)
    assert _children() == before


def test_a_paused_worker_that_resumes_finishes_the_call(tmp_path, small_shares):
    """A worker stopped (SIGSTOP) is waited for, not given up on: once resumed, the call ends
    with every row written."""

    def pause_then_resume(pid):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.0)
        os.kill(pid, signal.SIGCONT)

    result = _worker_pids_then(pause_then_resume, tmp_path)
    assert isinstance(result, np.ndarray) and (result == 1.0).all()
