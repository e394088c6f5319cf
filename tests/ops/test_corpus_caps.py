"""cap_corpora(): a seeded uniform sample of each capped corpus's passing pairs, exactly
min(cap, passing) of them, drawn from the whole file, in bounded memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ops.pairs.corpus_caps import SmallestKeys, cap_corpora
from ops.pairs.pair_files import PairWriter, has_corpus_column, iter_pairs


def write_corpora(path: Path, corpora: list[tuple[str, int]], batch: int = 7) -> list[tuple]:
    """Pairs ``(en i of NAME, de i of NAME)`` per corpus, in order, written ``batch`` at a time
    (so a corpus spans several batches); returns ``(name, i)`` of each row."""
    rows = []
    with PairWriter(path, src_lang="en", tgt_lang="de", with_corpus=True) as writer:
        for name, n in corpora:
            for start in range(0, n, batch):
                ids = range(start, min(n, start + batch))
                writer.write(
                    [f"en {i} of {name}" for i in ids],
                    [f"de {i} von {name}" for i in ids],
                    None,
                    name,
                )
                rows += [(name, i) for i in ids]
    return rows


def kept_rows(path: Path) -> list[tuple[str, int]]:
    return [(src.split(" of ")[1], int(src.split()[1])) for src, _ in iter_pairs(path)]


@pytest.mark.parametrize("cap", [0, 1, 30, 99, 100, 150])
def test_a_capped_corpus_gives_min_cap_passing_pairs_and_the_rest_all(tmp_path, cap) -> None:
    source = tmp_path / "in.parquet"
    write_corpora(source, [("Open", 100), ("Tanzil", 20)])
    report = cap_corpora(source, tmp_path / "out.parquet", {"Open": cap, "Tanzil": None})
    kept = kept_rows(tmp_path / "out.parquet")
    open_kept = [i for name, i in kept if name == "Open"]
    assert len(open_kept) == min(cap, 100)
    assert open_kept == sorted(open_kept)  # file order kept
    assert [i for name, i in kept if name == "Tanzil"] == list(range(20))
    assert has_corpus_column(tmp_path / "out.parquet")  # kept for later stages' records
    assert report.as_dict()["corpora"] == {
        "Open": {"passing": 100, "cap": cap, "kept": min(cap, 100)},
        "Tanzil": {"passing": 20, "cap": None, "kept": 20},
    }
    assert report.n_out == min(cap, 100) + 20
    assert dict(report.dropped) == ({"capped": 100 - cap} if cap < 100 else {})


def test_the_sample_is_drawn_from_the_whole_file_and_seeded(tmp_path) -> None:
    source = tmp_path / "in.parquet"
    write_corpora(source, [("Open", 10_000)], batch=997)
    runs = {}
    for seed in (1, 1, 2):
        output = tmp_path / f"out-{seed}.parquet"
        cap_corpora(source, output, {"Open": 1_000}, seed=seed)
        runs.setdefault(seed, []).append([i for _, i in kept_rows(output)])
    first, again = runs[1]
    assert first == again  # same seed, same sample
    assert len(set(first) & set(runs[2][0])) < 300  # another seed, another sample (~100 shared)
    # uniform over the file, not its first lines: about 100 per tenth of the file
    per_tenth = np.bincount(np.array(first) // 1_000, minlength=10)
    assert per_tenth.min() > 60 and per_tenth.max() < 140, per_tenth


def test_identical_keys_at_the_threshold_still_give_exactly_the_cap(tmp_path) -> None:
    source = tmp_path / "in.parquet"
    with PairWriter(source, src_lang="en", tgt_lang="de", with_corpus=True) as writer:
        writer.write(["same"] * 5, ["gleich"] * 5, None, "Open")  # five equal keys
    cap_corpora(source, tmp_path / "out.parquet", {"Open": 3})
    assert pq.read_metadata(tmp_path / "out.parquet").num_rows == 3


def test_a_file_without_corpus_column_is_copied_whole(tmp_path) -> None:
    source = tmp_path / "in.parquet"
    with PairWriter(source, src_lang="en", tgt_lang="de") as writer:
        writer.write(["a b c", "d e f"], ["x", "y"])
    report = cap_corpora(source, tmp_path / "out.parquet", {"Open": 1})
    assert list(iter_pairs(tmp_path / "out.parquet")) == [("a b c", "x"), ("d e f", "y")]
    assert report.n_out == 2


@pytest.mark.parametrize("caps", [{}, {"Open": None}, {"Open": 100, "Tanzil": 5_000}])
def test_with_nothing_to_drop_the_output_is_the_input_linked_not_rewritten(tmp_path, caps) -> None:
    source = tmp_path / "in.parquet"
    write_corpora(source, [("Open", 100), ("Tanzil", 20)])
    output = tmp_path / "out.parquet"
    output.write_bytes(b"an older output")  # replaced, as a rewrite would replace it
    report = cap_corpora(source, output, caps)
    assert output.stat().st_ino == source.stat().st_ino  # a hard link: no second copy
    assert kept_rows(output) == kept_rows(source)
    assert report.n_in == report.n_out == 120 and not report.dropped
    assert report.as_dict()["corpora"] == {
        "Open": {"passing": 100, "cap": caps.get("Open"), "kept": 100},
        "Tanzil": {"passing": 20, "cap": caps.get("Tanzil"), "kept": 20},
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "out.parquet"]


def test_smallest_keys_is_exact_and_bounded() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=200_000, dtype=np.uint64)
    sample = SmallestKeys(1_000)
    largest_held = 0
    for start in range(0, len(keys), 4_096):
        sample.add(keys[start : start + 4_096])
        held = len(sample._kept) + sample._n_pending  # noqa: SLF001 (the bound under test)
        largest_held = max(largest_held, held)
    threshold, n_equal = sample.cut()
    assert threshold == int(np.sort(keys)[999]) and n_equal == 1
    assert largest_held <= 1_000 + (1 << 16) + 4_096
