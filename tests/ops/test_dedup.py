from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ops.pairs.dedup import FingerprintSet, deduplicate, lowercase, pair_fingerprints
from ops.pairs.pair_files import PairWriter, iter_pair_chunks, iter_pairs
from ops.sources.text_io import read_aligned
from tests.conftest import require_shared_data


def write_pairs(path: Path, pairs, *, scores=None) -> Path:
    with PairWriter(path, src_lang="en", tgt_lang="tr", with_score=scores is not None) as w:
        w.write([p[0] for p in pairs], [p[1] for p in pairs], scores)
    return path


def test_lowercase_equals_python_str_lower() -> None:
    texts = ["Hello World", "İSTANBUL'DA", "ΟΔΟΣ ΣΟΦΙΑΣ", "ÄÖÜ ẞ", "ǅ Ǆ", "", "ПРИВЕТ 中文"]
    assert lowercase(pa.array(texts)).to_pylist() == [t.lower() for t in texts]


def test_fingerprints_tell_sides_apart() -> None:
    src = pa.array(["a", "b", "a b", "a", "a"])
    tgt = pa.array(["b", "a", "c", "b c", "b"])
    fingerprints = pair_fingerprints(src, tgt)
    assert fingerprints.dtype == np.uint64
    assert len(set(fingerprints[:4].tolist())) == 4 and fingerprints[0] == fingerprints[4]


def test_fingerprint_set_matches_a_python_set() -> None:
    rng = np.random.default_rng(0)
    universe = rng.integers(0, 2**64 - 1, size=5000, dtype=np.uint64, endpoint=True)
    universe[:2] = [0, 7]  # 0 is the empty-slot marker: it is stored as 1, and still a key
    fingerprints, reference = FingerprintSet(capacity=8), set()
    for _ in range(20):
        keys = rng.choice(universe, size=700)  # repeats inside and across batches
        expected = []
        for key in keys.tolist():
            key = key or 1
            expected.append(key not in reference)
            reference.add(key)
        np.testing.assert_array_equal(fingerprints.add(keys), expected)
    assert len(fingerprints) == len(reference)
    assert fingerprints.nbytes <= 8 * 4 * len(fingerprints)  # grown by doubling, < 70% full


def test_deduplicate_lowercases_and_keeps_first_copy(tmp_path: Path) -> None:
    pairs = [
        ("The House", "Das Haus"),
        ("a b", "c"),
        ("the house", "das HAUS"),  # same pair once lowercased
        ("a", "b c"),  # not the same as ("a b", "c")
        ("c", "a b"),
        ("THE HOUSE", "DAS HAUS"),
        ("a b", "c"),
    ]
    source = write_pairs(tmp_path / "in.parquet", pairs, scores=[0.1 * i for i in range(7)])
    report = deduplicate(source, tmp_path / "out.parquet", batch_size=2)
    assert report.as_dict()["dropped"] == {"duplicate": 3}
    ((src, tgt, score),) = iter_pair_chunks(tmp_path / "out.parquet", batch_size=100)
    assert list(zip(src, tgt, strict=True)) == [
        ("the house", "das haus"),
        ("a b", "c"),
        ("a", "b c"),
        ("c", "a b"),
    ]
    assert score == pytest.approx([0.0, 0.1, 0.3, 0.4])


@pytest.mark.real_data
def test_real_bitext_dedup_removes_only_duplicates(tmp_path: Path) -> None:
    folder = require_shared_data("bitext", "en-de")
    pairs = []
    for pair in read_aligned(folder / "combined.en.gz", folder / "combined.de.gz"):
        pairs.append(pair)
        if len(pairs) == 30_000:
            break
    pairs += pairs[:1000]  # plus exact repeats
    source = write_pairs(tmp_path / "in.parquet", pairs)
    report = deduplicate(source, tmp_path / "out.parquet", batch_size=8192)
    expected = list(dict.fromkeys((s.lower(), t.lower()) for s, t in pairs))
    assert list(iter_pairs(tmp_path / "out.parquet")) == expected
    assert report.dropped["duplicate"] == len(pairs) - len(expected) >= 1000


@pytest.mark.parametrize("block", [4096, 61])
def test_lowercase_mismatches_equal_the_per_character_definition(block: int) -> None:
    from ops.pairs.dedup import _lowercase_mismatches

    characters = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    lowered = pc.utf8_lower(pa.array(characters)).to_pylist()
    expected = {ord(c) for c, low in zip(characters, lowered, strict=True) if c.lower() != low}
    assert 0x130 in expected  # İ: two characters in Python, so a block is checked one by one
    assert _lowercase_mismatches(block) == expected
