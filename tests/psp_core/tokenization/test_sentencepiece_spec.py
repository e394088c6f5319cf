"""The serialized sentencepiece model's reader (``psp_core/tokenization/sentencepiece_spec.py``):
reading without the pieces gives the same settings and the same answer on user-defined pieces
as reading them all, on models with and without such pieces and on a piece whose score's bytes
look like the user-defined type; the word cache and the exports act on that answer."""

from __future__ import annotations

import dataclasses
import struct

import pytest
import sentencepiece as spm

from psp_core.models.export import ExportError, build_tokenizer
from psp_core.tokenization.sentencepiece_spec import (
    _USER_DEFINED,
    _USER_DEFINED_BYTES,
    SentencePieceSpec,
    _fields,
)
from psp_core.tokenization.word_piece_cache import word_independent
from tests.conftest import toy_sentencepiece


def _settings(spec: SentencePieceSpec) -> dict:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k not in ("pieces", "unk_id")}


def _assert_both_readings_agree(proto: bytes) -> SentencePieceSpec:
    whole, light = SentencePieceSpec.parse(proto), SentencePieceSpec.parse(proto, pieces=False)
    assert (
        light.pieces == []
        and len(whole.pieces) == spm.SentencePieceProcessor(model_proto=proto).GetPieceSize()
    )
    assert _settings(light) == _settings(whole)
    assert whole.user_defined == any(kind == _USER_DEFINED for *_, kind in whole.pieces)
    return whole


def test_a_model_without_user_defined_pieces(spm_proto) -> None:
    spec = _assert_both_readings_agree(spm_proto)
    assert not spec.user_defined and word_independent(spm_proto)


def test_user_defined_pieces_are_found_and_turn_the_word_cache_off(toy) -> None:
    proto = toy_sentencepiece(toy, 500, 300, user_defined_symbols=["<sep>", "abc def"])
    spec = _assert_both_readings_agree(proto)
    assert spec.user_defined
    assert [p for p, _, kind in spec.pieces if kind == _USER_DEFINED] == ["<sep>", "abc def"]
    assert not word_independent(proto)


def test_a_score_whose_bytes_look_like_the_user_defined_type_is_not_one(spm_proto) -> None:
    """A normal piece whose score is written with the bytes of ``type = USER_DEFINED``: the
    reading without the pieces decodes it and finds a normal piece."""
    score = struct.unpack("<f", _USER_DEFINED_BYTES + b"\x80\xbf")[0]  # about -1.0
    assert score < 0 and struct.pack("<f", score).startswith(_USER_DEFINED_BYTES)
    model = _fields(spm_proto)
    piece = next(raw for raw in model[1] if _fields(raw).get(3, [1])[-1] == 1)  # a normal one
    old_score = b"\x15" + _fields(piece)[2][-1]
    assert piece.count(old_score) == 1
    changed = piece.replace(old_score, b"\x15" + struct.pack("<f", score))
    assert spm_proto.count(piece) == 1
    proto = spm_proto.replace(piece, changed)  # (same length: the enclosing lengths hold)
    spm.SentencePieceProcessor(model_proto=proto)  # sentencepiece reads it
    spec = _assert_both_readings_agree(proto)
    assert _USER_DEFINED_BYTES in changed and not spec.user_defined
    assert word_independent(proto)


def test_the_exports_refuse_user_defined_pieces(tmp_path, toy) -> None:
    proto = toy_sentencepiece(toy, 500, 300, user_defined_symbols=["<sep>"])
    with pytest.raises(ExportError, match="user-defined pieces"):
        build_tokenizer(proto)
