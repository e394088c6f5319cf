"""``encode(precision=...)`` and ``quantize_embeddings``: the codes sentence-transformers gives
(the same bytes, checked against its own function where it is installed), from numpy alone; a
precision that needs ranges and has none is refused with what to do."""

from __future__ import annotations

import numpy as np
import pytest

from psp_core import quantization_ranges, quantize_embeddings
from psp_core.inference.quantize import PRECISIONS

SENTENCES = [f"the old man reads letter number {i} to a cat" for i in range(40)] + ["", "ok"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_codes_are_sentence_transformers_own(precision) -> None:
    quantization = pytest.importorskip(
        "sentence_transformers.quantization", reason="sentence-transformers is not installed"
    )
    rng = np.random.default_rng(3)
    embeddings = rng.normal(size=(300, 37)).astype(np.float32)
    embeddings[5] = 0.0  # a sentence with nothing to embed
    calibration = rng.normal(size=(500, 37)).astype(np.float32)
    theirs = quantization.quantize_embeddings(
        embeddings, precision, calibration_embeddings=calibration
    )
    ours = quantize_embeddings(embeddings, precision, calibration_embeddings=calibration)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    # ranges computed once give the same codes as the calibration set they came from
    ranges = quantization_ranges(calibration)
    np.testing.assert_array_equal(quantize_embeddings(embeddings, precision, ranges=ranges), ours)


def test_encode_gives_each_precision_with_its_shape_and_type(model) -> None:
    floats = model.encode(SENTENCES)
    expected = {"int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}
    for precision, dtype in expected.items():
        codes = model.encode(SENTENCES, precision=precision)
        width = model.dim if precision.endswith("int8") else (model.dim + 7) // 8
        assert codes.dtype == dtype and codes.shape == (len(SENTENCES), width)
        np.testing.assert_array_equal(codes, quantize_embeddings(floats, precision))
    # the sign bits of a string's vector
    bits = model.encode(SENTENCES[0], precision="ubinary")
    np.testing.assert_array_equal(np.unpackbits(bits)[: model.dim], floats[0] > 0)


def test_what_cannot_be_quantized_is_refused_with_the_way_out(model) -> None:
    with pytest.raises(ValueError, match="one sentence: its ranges come from several"):
        model.encode("a cat", precision="int8")
    with pytest.raises(ValueError, match="expected one of float32, int8"):
        model.encode(SENTENCES, precision="float16")
    with pytest.raises(ValueError, match="needs ranges"):
        quantize_embeddings(np.ones(8, dtype=np.float32), "uint8")
    with pytest.raises(ValueError, match=r"ranges must have shape \(2, 8\)"):
        quantize_embeddings(np.ones((3, 8)), "int8", ranges=np.zeros((2, 7)))
    with pytest.raises(ValueError, match="must be float"):
        quantize_embeddings(np.ones((3, 8), dtype=np.int8), "binary")
    with pytest.raises(ValueError, match="at least 2 calibration embeddings"):
        quantization_ranges(np.ones((1, 8)))
    # one sentence with ranges from a sample is fine
    ranges = quantization_ranges(model.encode(SENTENCES))
    one = quantize_embeddings(model.encode("a cat"), "int8", ranges=ranges)
    assert one.shape == (model.dim,) and one.dtype == np.int8
