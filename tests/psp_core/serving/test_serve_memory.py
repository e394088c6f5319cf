"""What a worker remembers across requests is bounded in bytes (``--word-cache-bytes``): a
client that sends many unique words, each twice (so each would be cached), and long "words"
that are never cached, leaves the worker's memory within a bound, and sending the same again
adds nothing."""

from __future__ import annotations

import random

import pytest

httpx = pytest.importorskip("httpx")

from tests.psp_core.serving.test_hostile_clients import Running  # noqa: E402 (after the skip)


def _inputs(seed: int, words: int, length: int) -> list[str]:
    rng = random.Random(seed)
    made = ["".join(rng.choice("abcdefghij") for _ in range(length)) for _ in range(words)]
    return [" ".join(made[i : i + 50]) for i in range(0, words, 50)]


@pytest.mark.slow
def test_unique_and_long_words_keep_the_worker_within_its_budget(tmp_path, model) -> None:
    server = Running(model.save(tmp_path / "bundle"), "--word-cache-bytes", str(4 << 20))
    try:
        before = server.rss_mb()
        rounds = []
        for _ in range(2):  # the same requests again: nothing more is kept
            for seed in range(8):  # 160,000 unique words of 60 characters, each sent twice
                for inputs in (_inputs(seed, 20_000, 60), _inputs(seed + 100, 1_000, 300)):
                    for _ in range(2):
                        answer = httpx.post(
                            f"{server.url}/v1/embeddings",
                            json={"model": "de", "input": inputs},
                            timeout=120,
                        )
                        assert answer.status_code == 200, answer.text[:300]
            rounds.append(server.rss_mb())
        # (unbounded, the words alone would hold about 80 MB; the budget is 4 MiB: what is
        # left is the allocator's working memory for a request)
        assert rounds[0] - before < 60, (before, rounds)
        assert rounds[1] - rounds[0] < 10, (before, rounds)
    finally:
        server.stop()
