from collections import Counter

import h5py
import numpy as np
import pyarrow as pa
import pytest

from ops.pairs.pair_files import PairWriter
from ops.training_data.encoding import EMPTY_AFTER_ENCODING, MAX_PIECES, encode_and_pack
from ops.training_data.sentencepiece_model import (
    reservoir_sample,
    reservoir_sample_arrays,
    train_sentencepiece_from_pairs,
)
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training.training_file import TrainingFile
from tests.conftest import require_shared_data


def write_pair_file(path, pairs, src_lang="en", tgt_lang="xx"):
    with PairWriter(path, src_lang=src_lang, tgt_lang=tgt_lang) as writer:
        writer.write([p[0] for p in pairs], [p[1] for p in pairs])
    return path


# ---------------------------------------------------------------------------------------------
# sampling


def sequential_algorithm_r(items, size, seed):
    """The textbook algorithm, one item at a time, with the draws the vectorized version makes
    when it sees everything as one array."""
    rng = np.random.default_rng(seed)
    sample = list(items[:size])
    positions = np.arange(size, len(items))
    slots = rng.integers(0, positions + 1) if len(positions) else []
    for item, slot in zip(items[size:], slots, strict=True):
        if slot < size:
            sample[slot] = item
    return sample


@pytest.mark.parametrize(("n", "size"), [(0, 5), (3, 5), (5, 5), (100, 5), (1000, 300), (50, 0)])
def test_vectorized_reservoir_matches_sequential_algorithm_r(n, size):
    items = [f"s{i}" for i in range(n)]
    for seed in range(5):
        got = reservoir_sample_arrays([pa.array(items, pa.string())], size, seed)
        assert got == sequential_algorithm_r(items, size, seed)


@pytest.mark.parametrize(
    ("sampler", "chunks"),
    [
        ("arrays", [50]),
        ("arrays", [7, 1, 30, 12]),
        ("arrays", [3, 3, 3, 41]),
        ("iterable", [50]),
    ],
)
def test_reservoir_inclusion_is_uniform(sampler, chunks):
    items = [str(i) for i in range(sum(chunks))]
    counts = Counter()
    for seed in range(2000):
        if sampler == "arrays":
            arrays, start = [], 0
            for size in chunks:
                arrays.append(pa.array(items[start : start + size]))
                start += size
            sample = reservoir_sample_arrays(arrays, 10, seed)
        else:
            sample = reservoir_sample(iter(items), 10, seed)
        assert len(sample) == 10 and len(set(sample)) == 10
        counts.update(sample)
    # each of 50 items is kept with probability 10/50: 400 times expected, sd about 18
    assert min(counts[i] for i in items) > 320 and max(counts.values()) < 480, counts


def test_reservoir_sample_is_seeded_and_bounded():
    items = [str(i) for i in range(100_000)]
    first = reservoir_sample(iter(items), 1000, seed=4)
    assert first == reservoir_sample(iter(items), 1000, seed=4)
    assert first != reservoir_sample(iter(items), 1000, seed=5)
    assert len(first) == 1000
    arrays = [pa.array(items[i : i + 4096]) for i in range(0, len(items), 4096)]
    sample = reservoir_sample_arrays(arrays, 1000, seed=4)
    assert sample == reservoir_sample_arrays(arrays, 1000, seed=4)
    assert len(set(sample)) == 1000 and sum(int(s) >= 50_000 for s in sample) > 400
    with pytest.raises(ValueError, match="sample size"):
        reservoir_sample_arrays(arrays, -1, seed=0)


# ---------------------------------------------------------------------------------------------
# sentencepiece from pairs


def test_train_sentencepiece_from_pairs_uses_both_sides(tmp_path, toy):
    pairs = [(s.lower(), t) for s, t in toy.pairs(1500, seed=5)] + [("", "   ")]
    source = write_pair_file(tmp_path / "pairs.parquet", pairs)
    model = train_sentencepiece_from_pairs(
        source, tmp_path / "spm.model", vocab_size=300, input_sentence_size=2000, seed=3
    )
    tokenizer = Tokenizer.from_file(model)
    assert 200 <= tokenizer.vocab_size <= 300
    # both "languages" are covered by real pieces: no unknown ids on either side
    for sentence in (pairs[0][0], pairs[0][1]):
        ids = tokenizer.processor.Encode(sentence)
        assert tokenizer.unk_id not in ids and tokenizer.processor.Decode(ids) == sentence
    # the temporary sample file is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.parquet", "spm.model"]


def test_a_byte_fallback_vocabulary_pieces_unknown_characters_as_bytes(tmp_path, toy):
    pairs = [(s.lower(), t) for s, t in toy.pairs(1500, seed=5)]
    source = write_pair_file(tmp_path / "pairs.parquet", pairs)
    model = train_sentencepiece_from_pairs(
        source, tmp_path / "spm.model", vocab_size=400, seed=3, byte_fallback=True
    )
    tokenizer = Tokenizer.from_file(model)
    batch = tokenizer.encode(["👍", "🎉"])
    assert batch.lengths.tolist() == [5, 5]  # the boundary and 4 UTF-8 bytes each
    pieces = [tokenizer.processor.IdToPiece(int(i)) for i in batch.sentence(0)]
    assert pieces == ["\u2581", "<0xF0>", "<0x9F>", "<0x91>", "<0x8D>"]


def test_a_vocabulary_too_small_for_the_script_is_raised_to_fit_its_characters(tmp_path, caplog):
    """Chinese text has more characters than a small profile's vocabulary (the smoke profile's 500
    failed inside sentencepiece on zh): the vocabulary grows to fit them, with a warning."""
    rng = np.random.default_rng(0)
    characters = [chr(0x4E00 + i) for i in range(900)]  # 900 CJK ideographs
    pairs = [
        (
            f"sentence {i}",
            "".join(rng.choice(characters, size=12)) + " " + "".join(characters[i::300]),
        )
        for i in range(1500)
    ]
    source = write_pair_file(tmp_path / "pairs.parquet", pairs, tgt_lang="zh")
    with caplog.at_level("WARNING", logger="ops.training_data.sentencepiece_model"):
        model = train_sentencepiece_from_pairs(
            source, tmp_path / "spm.model", vocab_size=300, character_coverage=1.0, seed=0
        )
    tokenizer = Tokenizer.from_file(model)
    assert tokenizer.vocab_size > 900
    ids = tokenizer.processor.Encode(pairs[5][1])
    assert tokenizer.unk_id not in ids  # every character is a piece
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "vocab_size 300 is smaller than" in warnings[0], warnings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.parquet", "spm.model"]


def test_train_sentencepiece_from_pairs_refuses_an_empty_file(tmp_path):
    source = write_pair_file(tmp_path / "pairs.parquet", [("", " "), (" ", "")])
    with pytest.raises(ValueError, match="no non-empty sentences"):
        train_sentencepiece_from_pairs(source, tmp_path / "spm.model", vocab_size=100, seed=0)
    assert not (tmp_path / "spm.model").exists()


# ---------------------------------------------------------------------------------------------
# encode and pack


def test_encode_and_pack_round_trip(tmp_path, toy, spm_proto):
    pairs = [(s.lower(), t) for s, t in toy.pairs(2500, seed=11)]
    pairs[10] = ("", pairs[10][1])  # empty source
    pairs[700] = (pairs[700][0], "   ")  # blank target
    long_source = " ".join(toy.source_words[:60] * 3)
    pairs[1200] = (long_source, pairs[1200][1])
    source = write_pair_file(tmp_path / "shuffled.parquet", pairs)
    tokenizer = Tokenizer(spm_proto, num_threads=2)
    report = encode_and_pack(
        source, tokenizer, tmp_path / "train.h5", lang="xx", kind="bitext", seed=9, batch_size=256
    )
    assert (report.n_in, report.n_out) == (2500, 2498)
    assert dict(report.dropped) == {"empty_after_encoding": 2}
    kept = [p for i, p in enumerate(pairs) if i not in (10, 700)]
    with TrainingFile(tmp_path / "train.h5") as data:
        info = data.info
        assert (info.n_pairs, info.lang, info.kind, info.seed) == (2498, "xx", "bitext", 9)
        assert (info.vocab_size, info.spm_sha256) == (tokenizer.vocab_size, tokenizer.sha256)
        src, tgt = data.read(0, len(data))
    decode = tokenizer.processor.Decode
    for i, (english, other) in enumerate(kept):
        if english == long_source:
            assert len(src.sentence(i)) == 100
            assert long_source.startswith(decode(src.sentence(i).tolist()))
            continue
        assert decode(src.sentence(i).tolist()) == english
        assert decode(tgt.sentence(i).tolist()) == other


def test_encode_and_pack_of_an_empty_file_writes_an_empty_training_file(tmp_path, spm_proto):
    source = write_pair_file(tmp_path / "empty.parquet", [])
    report = encode_and_pack(
        source, Tokenizer(spm_proto), tmp_path / "t.h5", lang="xx", kind="paraphrase", seed=0
    )
    assert (report.n_in, report.n_out) == (0, 0)
    with TrainingFile(tmp_path / "t.h5") as data:
        assert len(data) == 0 and data.info.kind == "paraphrase"


def test_encode_and_pack_leaves_no_partial_file(tmp_path, spm_proto):
    source = write_pair_file(tmp_path / "p.parquet", [("a b c", "k l m")])
    with pytest.raises(ValueError, match="kind"):
        encode_and_pack(
            source, Tokenizer(spm_proto), tmp_path / "t.h5", lang="xx", kind="other", seed=0
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parquet"]


def read_training_file(path):
    """Every dataset's values and every attribute of a training HDF5."""
    with h5py.File(path, "r") as handle:
        datasets = {name: handle[name][()] for name in handle}
        attrs = dict(handle.attrs)
    return datasets, attrs


@pytest.mark.parametrize(
    "settings",
    [
        # the pack stage's settings
        dict(lowercase=False, pretokenizer="none", max_length=MAX_PIECES),
        # settings that change the ids, so a worker that ignored them would write other ids
        dict(lowercase=True, pretokenizer="none", max_length=7),
    ],
)
def test_encode_and_pack_writes_the_same_file_for_any_number_of_workers(
    tmp_path, toy, spm_proto, settings
):
    pairs = toy.pairs(1000, seed=21)
    for row in (0, 5, 64, 65, 300, 999):  # several batches with pairs that encode to nothing
        pairs[row] = ("", pairs[row][1]) if row % 2 else (pairs[row][0], "  ")
    pairs[128:192] = [("", "")] * 64  # a batch of nothing but empty pairs
    pairs[400] = ("ZZZ " + pairs[400][0], "草 " + pairs[400][1])  # unknown pieces
    pairs[401] = ("草草", pairs[401][1])  # nothing but unknown pieces: nothing to train on
    pairs[500] = (" ".join(toy.source_words[:60] * 2), pairs[500][1])  # truncated
    source = write_pair_file(tmp_path / "pairs.parquet", pairs)
    files, reports = {}, {}
    for workers in (1, 2, 3):
        tokenizer = Tokenizer(spm_proto, num_threads=2, **settings)
        output = tmp_path / f"train-{workers}.h5"
        reports[workers] = encode_and_pack(
            source,
            tokenizer,
            output,
            lang="xx",
            kind="bitext",
            seed=3,
            batch_size=64,
            workers=workers,
        ).as_dict()
        files[workers] = read_training_file(output)
    expected_drops = {EMPTY_AFTER_ENCODING: 6 + 64 + 1}
    for workers in (1, 2, 3):
        report = reports[workers]
        assert (report["n_in"], report["n_out"], report["dropped"]) == (1000, 929, expected_drops)
        datasets, attrs = files[workers]
        reference_datasets, reference_attrs = files[1]
        assert attrs == reference_attrs
        assert sorted(datasets) == ["src_ids", "src_offsets", "tgt_ids", "tgt_offsets"]
        for name, values in datasets.items():
            assert values.dtype == reference_datasets[name].dtype
            np.testing.assert_array_equal(values, reference_datasets[name], err_msg=name)
    assert files[1][1]["n_pairs"] == 929


def test_encode_and_pack_in_workers_keeps_the_input_order(tmp_path, toy, spm_proto):
    pairs = [(s.lower(), t) for s, t in toy.pairs(700, seed=4)]
    source = write_pair_file(tmp_path / "pairs.parquet", pairs)
    tokenizer = Tokenizer(spm_proto)
    encode_and_pack(
        source,
        tokenizer,
        tmp_path / "t.h5",
        lang="xx",
        kind="bitext",
        seed=0,
        batch_size=50,
        workers=2,
    )
    with TrainingFile(tmp_path / "t.h5") as data:
        src, tgt = data.read(0, len(data))
    decode = tokenizer.processor.Decode
    assert [
        (decode(src.sentence(i).tolist()), decode(tgt.sentence(i).tolist()))
        for i in range(len(pairs))
    ] == pairs


@pytest.mark.parametrize("workers", [1, 2])
def test_an_encoding_error_reaches_the_caller_and_leaves_no_partial_file(
    tmp_path, toy, spm_proto, workers
):
    pairs = toy.pairs(300, seed=8)
    pairs[250] = (None, pairs[250][1])  # sentencepiece refuses a null
    source = write_pair_file(tmp_path / "p.parquet", pairs)
    with pytest.raises(TypeError):
        encode_and_pack(
            source,
            Tokenizer(spm_proto, lowercase=False),
            tmp_path / "t.h5",
            lang="xx",
            kind="bitext",
            seed=0,
            batch_size=32,
            workers=workers,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parquet"]


@pytest.mark.slow
@pytest.mark.real_data
def test_the_quick_profile_vocabulary_trains_on_the_real_chinese_bitext(tmp_path):
    """the smoke profile's 500 pieces on the shared en-zh bitext, jieba-segmented as the
    chain does: sentencepiece needed about 1,700 for the characters and failed; now it fits."""
    import gzip

    from ops.cleaning.segmentation import segment_pairs

    bitext = require_shared_data("bitext", "en-zh")
    with (
        gzip.open(bitext / "combined.en.gz", "rt") as en,
        gzip.open(bitext / "combined.zh.gz", "rt") as zh,
    ):
        pairs = [
            (e.strip().lower(), z.strip()) for e, z, _ in zip(en, zh, range(5_000), strict=False)
        ]
    source = write_pair_file(tmp_path / "pairs.parquet", pairs, tgt_lang="zh")
    # in worker processes: this process's jieba (initialised once per process) stays untouched
    segmented = segment_pairs(
        source, tmp_path / "segmented.parquet", cache_dir=tmp_path / "cache", workers=2
    )
    assert segmented.n_out == len(pairs)
    model = train_sentencepiece_from_pairs(
        tmp_path / "segmented.parquet", tmp_path / "spm.model", vocab_size=500, seed=1
    )
    assert Tokenizer.from_file(model).vocab_size > 1_000
