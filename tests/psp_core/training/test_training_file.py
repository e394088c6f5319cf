import h5py
import numpy as np
import pytest

from psp_core.tokenization.csr import TokenBatch
from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training.training_file import TrainingFile, TrainingFileError, TrainingFileWriter


def random_batch(rng, n, vocab=100):
    return flatten_id_lists(
        [rng.integers(0, vocab, size=rng.integers(0, 15)).tolist() for _ in range(n)]
    )


def lists(batch: TokenBatch):
    return [batch.sentence(i).tolist() for i in range(len(batch))]


def write(path, chunks, **attrs):
    kwargs = dict(vocab_size=100, spm_sha256="ab" * 32, lang="de", kind="bitext", seed=7) | attrs
    with TrainingFileWriter(path, **kwargs) as writer:
        for source, target in chunks:
            writer.append(source, target)
    return path


def test_round_trip_across_appends_and_slices(tmp_path):
    rng = np.random.default_rng(0)
    chunks = [(random_batch(rng, n), random_batch(rng, n)) for n in (5, 0, 17, 1)]
    path = write(tmp_path / "train.h5", chunks)
    all_source = sum((lists(s) for s, _ in chunks), [])
    all_target = sum((lists(t) for _, t in chunks), [])
    with TrainingFile(path) as data:
        assert len(data) == 23
        assert data.info.vocab_size == 100 and data.info.lang == "de" and data.info.seed == 7
        assert data.info.kind == "bitext" and data.info.spm_sha256 == "ab" * 32
        for start, stop in [(0, 23), (3, 9), (22, 23), (5, 5)]:
            source, target = data.read(start, stop)
            assert lists(source) == all_source[start:stop]
            assert lists(target) == all_target[start:stop]
        with pytest.raises(IndexError):
            data.read(10, 24)
    with h5py.File(path) as raw:
        assert raw["src_ids"].dtype == np.int32 and raw["src_offsets"].dtype == np.int64
        assert raw["src_ids"].compression == "gzip" and raw["src_ids"].chunks is not None
        assert raw.attrs["format_version"] == 1 and raw.attrs["n_pairs"] == 23


def test_failed_write_leaves_nothing_at_the_final_path(tmp_path):
    rng = np.random.default_rng(1)
    with pytest.raises(RuntimeError, match="boom"):
        with TrainingFileWriter(
            tmp_path / "t.h5", vocab_size=100, spm_sha256="x", lang="de"
        ) as writer:
            writer.append(random_batch(rng, 3), random_batch(rng, 3))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_ids_outside_the_vocabulary_are_refused(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        write(tmp_path / "t.h5", [(flatten_id_lists([[1, 100]]), flatten_id_lists([[1]]))])


def test_unequal_sides_are_refused(tmp_path):
    with pytest.raises(ValueError, match="2 source sentences but 1 target"):
        write(tmp_path / "t.h5", [(flatten_id_lists([[1], [2]]), flatten_id_lists([[1]]))])


def test_truncated_and_incomplete_files_are_refused(tmp_path):
    rng = np.random.default_rng(2)
    path = write(tmp_path / "t.h5", [(random_batch(rng, 50), random_batch(rng, 50))])
    with h5py.File(path, "a") as raw:
        raw["tgt_ids"].resize((raw["tgt_ids"].shape[0] - 3,))
    with pytest.raises(TrainingFileError, match="tgt_offsets ends at .*truncated"):
        TrainingFile(path)
    with h5py.File(path, "a") as raw:
        del raw.attrs["spm_sha256"]
    with pytest.raises(TrainingFileError, match="missing attributes"):
        TrainingFile(path)
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not hdf5")
    with pytest.raises(TrainingFileError, match="not a readable HDF5"):
        TrainingFile(garbage)
