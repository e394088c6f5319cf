import numpy as np
import pytest

from psp_core.tokenization.csr import TokenBatch
from psp_core.tokenization.tokenizer import Tokenizer, clean_ids, flatten_id_lists


def naive_clean(id_lists, unk, max_length, boundary=None):
    result = []
    for ids in id_lists:
        kept = [i for i in ids if i != unk]
        if len(kept) < len(ids) and all(i == boundary for i in kept):
            kept = []  # no piece the vocabulary knows
        result.append(kept[:max_length] if max_length > 0 else kept)
    return result


def as_lists(batch: TokenBatch):
    return [batch.sentence(i).tolist() for i in range(len(batch))]


@pytest.mark.parametrize(
    ("id_lists", "expected"),
    [
        ([[5, 0, 6]], [[5, 6]]),  # unknown dropped
        ([[0, 0]], [[]]),  # only unknowns: nothing to embed
        ([[1, 0]], [[]]),  # the boundary piece and unknowns: nothing to embed
        ([[1, 0, 1, 0, 1]], [[]]),
        ([[1, 0, 1, 5]], [[1, 1, 5]]),  # a known piece: the boundaries stay
        ([[1, 1]], [[1, 1]]),  # boundaries without an unknown piece stay
        ([[]], [[]]),  # empty stays empty
        ([[1, 2, 3, 4, 5]], [[1, 2, 3]]),  # truncated to 3
        ([[0, 1, 0, 2, 3, 4]], [[1, 2, 3]]),  # unknowns dropped before truncation
        ([[7], [], [0], [0, 9], [1, 0], [2]], [[7], [], [], [9], [], [2]]),
    ],
)
def test_clean_ids_table(id_lists, expected):
    batch = flatten_id_lists(id_lists)
    assert as_lists(clean_ids(batch, unk_id=0, max_length=3, boundary_id=1)) == expected


def test_clean_ids_matches_naive_on_random_batches():
    rng = np.random.default_rng(0)
    for _ in range(50):
        id_lists = [
            rng.integers(0, 4, size=rng.integers(0, 12)).tolist()
            for _ in range(rng.integers(1, 30))
        ]
        for max_length in (0, 1, 5):
            for boundary in (None, 1):
                got = as_lists(clean_ids(flatten_id_lists(id_lists), 0, max_length, boundary))
                assert got == naive_clean(id_lists, 0, max_length, boundary)


def test_encode_lowercases_and_matches_sentencepiece(tokenizer: Tokenizer):
    upper = tokenizer.encode(["Abc DEF ghi"])
    lower = tokenizer.encode(["abc def ghi"])
    assert upper.ids.tolist() == lower.ids.tolist()
    expected = tokenizer.processor.Encode("abc def ghi", out_type=int)
    assert lower.ids.tolist() == [i for i in expected if i != tokenizer.unk_id]


def test_encode_drops_unknown_pieces(tokenizer: Tokenizer):
    # the toy vocabulary has only letters a-u: Greek letters are unknown pieces
    raw = tokenizer.processor.Encode("abc ωψχ", out_type=int)
    assert tokenizer.unk_id in raw
    mixed = tokenizer.encode(["abc ωψχ"])
    assert mixed.ids.tolist() == [i for i in raw if i != tokenizer.unk_id]


def test_encode_truncates_and_keeps_order(spm_proto: bytes):
    short = Tokenizer(spm_proto, max_length=4)
    long_sentence = " ".join(["abcdefghij"] * 30)
    batch = short.encode(["", long_sentence, "abc"])
    assert batch.lengths.tolist()[0] == 0
    assert batch.lengths.tolist()[1] == 4
    assert batch.sentence(2).tolist() == short.encode(["abc"]).ids.tolist()


def test_lowercase_can_be_disabled(spm_proto: bytes):
    cased = Tokenizer(spm_proto, lowercase=False)
    assert cased.encode(["ABC"]).ids.tolist() != cased.encode(["abc"]).ids.tolist()


def test_jieba_pretokenizer_segments_chinese(spm_proto: bytes):
    chinese = Tokenizer(spm_proto, pretokenizer="jieba")
    assert chinese.normalize(["我爱北京天安门"]) == ["我 爱 北京 天安门"]


def test_rjieba_pretokenizer_segments_chinese_and_is_recorded_in_the_bundle(spm_proto, tmp_path):
    from psp_core import PSPModel, load_model
    from psp_core.models.bundle import BundleConfig

    chinese = Tokenizer(spm_proto, pretokenizer="rjieba")
    assert chinese.normalize(["我爱北京天安门, Hello World"]) == ["我 爱 北京 天安门 , hello world"]
    config = BundleConfig(
        dim=4, vocab_size=chinese.vocab_size, spm_sha256=chinese.sha256, pretokenizer="rjieba"
    )
    table = np.ones((chinese.vocab_size, 4), dtype=np.float32)
    bundle = PSPModel(chinese, table, config).save(tmp_path / "zh")
    assert load_model(bundle).tokenizer.pretokenizer_name == "rjieba"


def test_unknown_pretokenizer_is_refused(spm_proto: bytes):
    with pytest.raises(ValueError, match="unknown pre-tokenizer 'moses'"):
        Tokenizer(spm_proto, pretokenizer="moses")


def test_token_batch_take_and_concat():
    batch = flatten_id_lists([[1, 2], [], [3, 4, 5]])
    assert as_lists(batch.take(np.array([2, 0, 2, 1]))) == [[3, 4, 5], [1, 2], [3, 4, 5], []]
    assert as_lists(TokenBatch.concat([batch, batch.slice(1, 3)])) == [
        [1, 2],
        [],
        [3, 4, 5],
        [],
        [3, 4, 5],
    ]
