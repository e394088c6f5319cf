"""One vocabulary for every script: the ``rjieba_han`` pre-tokenizer segments only the
runs of Han characters, so in a sentence mixing Latin, Arabic and Chinese the Latin and Arabic
words get the very pieces they get alone, with no pre-tokenizer; jieba on the whole sentence
would not (it splits Arabic into letters and punctuation off Latin words)."""

from __future__ import annotations

import numpy as np
import pytest

from ops.training_data.sentencepiece_model import train_sentencepiece
from psp_core.tokenization.tokenizer import Tokenizer, make_pretokenizer
from tests.pipelines.corpora import english_chinese

ARABIC = ["مرحبا بالعالم", "الكتاب الجديد على الطاولة", "ذهب الولد إلى المدرسة", "شكرا لك"]
#: (part, is Chinese) in the order the sentence joins them with spaces
PARTS = [
    ("the old man's letter,", False),
    ("我们喜欢读书。", True),
    ("مرحبا بالعالم!", False),
    ("老人在花园里读一封长信", True),
    ("reads (again) 3.5 pages", False),
    ("الكتاب", False),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    english, chinese = english_chinese(2000, seed=9)
    segment = make_pretokenizer("rjieba_han")
    sample = [s.lower() for s in english] + [segment(s) for s in chinese] + ARABIC * 200
    return train_sentencepiece(sample, tmp_path_factory.mktemp("spm") / "spm.model", vocab_size=500)


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode([text]).ids.tolist()


def test_latin_and_arabic_words_keep_their_pieces_beside_chinese(model) -> None:
    shared = Tokenizer.from_file(model, pretokenizer="rjieba_han")
    plain = Tokenizer.from_file(model, pretokenizer="none")
    sentence = " ".join(part for part, _ in PARTS)
    expected = []
    for part, chinese in PARTS:
        expected += _ids(shared if chinese else plain, part)
    assert _ids(shared, sentence) == expected
    # Han runs glued to other scripts are set apart, as if a space stood there
    assert _ids(shared, "我们喜欢读书the letter") == _ids(shared, "我们喜欢读书 the letter")
    # jieba over the whole sentence changes the other scripts' pieces
    whole = Tokenizer.from_file(model, pretokenizer="rjieba")
    assert _ids(whole, sentence) != expected


def test_chinese_runs_are_segmented_as_rjieba_segments_chinese(model) -> None:
    han, whole = make_pretokenizer("rjieba_han"), make_pretokenizer("rjieba")
    _, chinese = english_chinese(200, seed=10)
    for text in chinese:
        assert han(text).split() == whole(text).split()
    assert han("no chinese here, وعربي") == "no chinese here, وعربي"
    # at inference as at training: the bundle's tokenizer applies it
    shared = Tokenizer.from_file(model, pretokenizer="rjieba_han")
    assert shared.normalize(["我们喜欢读书"]) == [han("我们喜欢读书")]
    assert np.array_equal(
        shared.encode(["我们喜欢读书"]).ids, shared.encode([han("我们喜欢读书")]).ids
    )
