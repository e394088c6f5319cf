"""What a serialized sentencepiece model says about its tokenization, read from the protobuf bytes
directly (sentencepiece's own ``sentencepiece_model_pb2`` needs a newer protobuf runtime than the
one Dagster's gRPC pins): its pieces with scores and types, the model type and the trainer and
normalizer flags that decide how text is split. Used by the exports (``psp_core/models/export.py``) and
the word cache (``psp_core/tokenization/word_piece_cache.py``)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


class SpecError(ValueError):
    """The bytes are not a sentencepiece model this reader understands."""


# sentencepiece_model.proto numbers (ModelProto, SentencePiece, TrainerSpec, NormalizerSpec)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_UNIGRAM = 1
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> dict[int, list[Any]]:
    """Decode one protobuf message's fields: ``{number: [values]}`` (bytes for length-delimited,
    int for varint, the raw 4 or 8 bytes for fixed-width). Enough for sentencepiece's model."""
    result: dict[int, list[Any]] = {}
    pos, end = 0, len(data)
    while pos < end:
        # (keys and lengths below 128, one byte, read inline: a model's pieces are tens of
        # thousands of short messages)
        key = data[pos]
        key, pos = (key, pos + 1) if key < 0x80 else _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length = data[pos]
            length, pos = (length, pos + 1) if length < 0x80 else _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise SpecError(f"sentencepiece model: unsupported protobuf wire type {wire}")
        result.setdefault(number, []).append(value)
    return result


#: how a SentencePiece's ``type = USER_DEFINED`` is written (tag of field 3, varint 4): a piece
#: whose bytes lack it cannot be one
_USER_DEFINED_BYTES = bytes([3 << 3, _USER_DEFINED])


def _piece(raw: bytes) -> tuple[str, float, int]:
    """One serialized SentencePiece: (piece, score, type)."""
    piece = _fields(raw)
    score = struct.unpack("<f", piece[2][-1])[0] if 2 in piece else 0.0
    return piece[1][-1].decode("utf-8"), score, piece.get(3, [_NORMAL])[-1]


@dataclass
class SentencePieceSpec:
    """What the export needs from a serialized sentencepiece model."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type); empty: not read
    user_defined: bool = False  # any piece of type USER_DEFINED
    model_type: int = _UNIGRAM
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    split_digits: bool = False
    precompiled_charsmap: bytes = b""
    normalizer_name: str = ""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    split_by_whitespace: bool = True
    allow_whitespace_only_pieces: bool = False
    unk_id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, proto: bytes, *, pieces: bool = True) -> SentencePieceSpec:
        """The spec of a serialized model. ``pieces=False``: its settings and ``user_defined``
        without the pieces (``[]``, and ``unk_id`` left 0): only the few pieces whose bytes
        could hold the user-defined type are decoded, a fraction of the time on a large
        vocabulary."""
        try:
            model = _fields(proto)
            serialized = model.get(1, [])
            if pieces:
                decoded = [_piece(raw) for raw in serialized]
                user_defined = any(kind == _USER_DEFINED for *_, kind in decoded)
            else:
                decoded = []
                user_defined = any(
                    _USER_DEFINED_BYTES in raw and _piece(raw)[2] == _USER_DEFINED
                    for raw in serialized
                )
            trainer = _fields(model[2][-1]) if 2 in model else {}
            normalizer = _fields(model[3][-1]) if 3 in model else {}
        except (IndexError, KeyError, UnicodeDecodeError, struct.error) as error:
            raise SpecError(f"cannot read the sentencepiece model ({error!r})") from error

        def flag(message: dict[int, list[Any]], number: int, default: bool) -> bool:
            return bool(message[number][-1]) if number in message else default

        return cls(
            pieces=decoded,
            user_defined=user_defined,
            model_type=trainer.get(3, [_UNIGRAM])[-1],
            byte_fallback=flag(trainer, 35, False),
            treat_whitespace_as_suffix=flag(trainer, 24, False),
            split_digits=flag(trainer, 25, False),
            precompiled_charsmap=normalizer.get(2, [b""])[-1],
            normalizer_name=normalizer.get(1, [b""])[-1].decode("utf-8", "replace"),
            add_dummy_prefix=flag(normalizer, 3, True),
            remove_extra_whitespaces=flag(normalizer, 4, True),
            escape_whitespaces=flag(normalizer, 5, True),
            split_by_whitespace=flag(trainer, 22, True),
            allow_whitespace_only_pieces=flag(trainer, 26, False),
            unk_id=next((i for i, p in enumerate(decoded) if p[2] == _UNKNOWN), 0),
        )
