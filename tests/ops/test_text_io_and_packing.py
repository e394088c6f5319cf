import gzip

import pytest

from ops.sources.text_io import atomic_path, read_aligned
from ops.training_data.packing import pack_pairs
from ops.training_data.sentencepiece_model import reservoir_sample, train_sentencepiece
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training.training_file import TrainingFile


def write_lines(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_read_aligned_pairs_lines(tmp_path, gz):
    suffix = ".gz" if gz else ""
    left = write_lines(tmp_path / f"a.en{suffix}", ["one", "two", ""], gz)
    right = write_lines(tmp_path / f"a.de{suffix}", ["eins", "zwei", "drei"], gz)
    assert list(read_aligned(left, right)) == [("one", "eins"), ("two", "zwei"), ("", "drei")]


@pytest.mark.parametrize(("left_n", "right_n", "short"), [(3, 2, "b.de"), (2, 3, "a.en")])
def test_read_aligned_refuses_unequal_files(tmp_path, left_n, right_n, short):
    left = write_lines(tmp_path / "a.en", [f"l{i}" for i in range(left_n)])
    right = write_lines(tmp_path / "b.de", [f"r{i}" for i in range(right_n)])
    with pytest.raises(ValueError, match=f"{short} ends after line 2"):
        list(read_aligned(left, right))


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "out.txt") as tmp:
            tmp.write_text("partial")
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []
    with atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("done")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_reservoir_sample_is_bounded_uniformish_and_seeded():
    sample = reservoir_sample((str(i) for i in range(10_000)), 100, seed=3)
    assert len(sample) == 100 and len(set(sample)) == 100
    assert sample == reservoir_sample((str(i) for i in range(10_000)), 100, seed=3)
    assert sum(int(x) >= 5000 for x in sample) > 30  # not just the first items
    assert reservoir_sample(iter(["a", "b"]), 5, seed=0) == ["a", "b"]


def test_sentencepiece_then_pack_round_trip(tmp_path, toy):
    pairs = toy.pairs(700, seed=4)
    model_path = train_sentencepiece(
        (s.lower() for pair in pairs for s in pair), tmp_path / "spm.model", vocab_size=300
    )
    tokenizer = Tokenizer.from_file(model_path)
    count = pack_pairs(iter(pairs), tokenizer, tmp_path / "t.h5", lang="xx", chunk_size=128)
    assert count == 700
    with TrainingFile(tmp_path / "t.h5") as data:
        source, target = data.read(0, len(data))
        assert data.info.spm_sha256 == tokenizer.sha256
    for i in (0, 129, 699):
        assert tokenizer.processor.Decode(source.sentence(i).tolist()) == pairs[i][0].lower()
        assert tokenizer.processor.Decode(target.sentence(i).tolist()) == pairs[i][1]


def test_sentencepiece_is_byte_identical_wherever_it_is_trained(tmp_path, toy):
    """The model holds no trace of where it was trained (it once recorded its temporary sample
    path), so a run killed and started again writes the same bytes; lines keep a ``\\r``."""
    sentences = [s.lower() for pair in toy.pairs(700, seed=5) for s in pair] + ["a\rb c"]
    first = train_sentencepiece(iter(sentences), tmp_path / "a" / "spm.model", vocab_size=300)
    second = train_sentencepiece(iter(sentences), tmp_path / "b" / "c" / "m", vocab_size=300)
    assert first.read_bytes() == second.read_bytes()
    assert b"sample.txt" not in first.read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["spm.model"]
