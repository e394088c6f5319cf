"""psp_core.models.export: bundles exported to sentence-transformers and model2vec, loaded offline,
give the same cosine geometry as psp_core's own embed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from psp_core import TrainConfig, train
from psp_core.cli import main
from psp_core.inference.model import load_model
from psp_core.models.export import ExportError, build_tokenizer, export_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.conftest import toy_sentencepiece


def _skip_without(module: str) -> None:
    pytest.importorskip(
        module, reason=f"{module} is not installed (pip install '.[export]'); skipping"
    )


@pytest.fixture(scope="module")
def trained_bundle(tmp_path_factory, toy_training_file, spm_path):
    work = tmp_path_factory.mktemp("export")
    config = TrainConfig(
        dim=32, batch_size=32, max_megabatch=4, anneal_every=5, log_every=0, lr=0.05, epochs=1
    )
    return train(toy_training_file, spm_path, work / "model", config).bundle


@pytest.fixture(scope="module")
def sentences(toy) -> list[str]:
    result = [s for pair in toy.pairs(40, seed=21) for s in pair]
    words = toy.source_words
    result += [s.upper() for s in result[:10]]  # uppercase (lowercased by both)
    result += [
        f"{words[0]} ЖЖЖ {words[1]}",  # unknown pieces between known ones
        f"中文 {words[2]} 漢字 {words[3]} ☃",
        f"  {words[4]}\t{words[5]}   {words[6]}  ",  # extra and odd whitespace
        f"{words[7]}ÄÖ{words[8]}",
        " ".join(words[i % len(words)] for i in range(200)),  # far over 100 pieces
        " ".join(words[i % len(words)].upper() for i in range(37, 400)),
        "ｆｕｌｌｗｉｄｔｈ " + words[9],  # NFKC folds these
        f"<s> {words[10]} </s> <unk> {words[11]}",  # control pieces are never matched in text
        " ".join("abcdefghij"[i % 10] for i in range(170)),  # over 100 pieces in 340 characters
    ]
    return result


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(na * nb, 1e-30)


def test_exported_tokenizer_gives_the_same_ids_as_psp(trained_bundle, sentences):
    _skip_without("tokenizers")
    model = load_model(trained_bundle)
    hf = build_tokenizer(model.tokenizer.model_proto, max_length=0)
    unk = model.tokenizer.unk_id
    for sentence in sentences:
        expected = model.tokenizer.processor.Encode(sentence.lower(), out_type=int)
        got = hf.encode(sentence, add_special_tokens=False).ids
        # sentencepiece merges a run of unknown characters into one piece; compare the known ones
        assert [i for i in got if i != unk] == [i for i in expected if i != unk], sentence


def _check_agreement(psp: np.ndarray, exported: np.ndarray, sentences: list[str]) -> None:
    assert exported.shape == psp.shape
    cos = cosines(psp.astype(np.float64), exported.astype(np.float64))
    bad = [(float(c), s[:60]) for c, s in zip(cos, sentences, strict=True) if c < 0.9999]
    assert not bad, bad


def test_sentence_transformers_export_loads_offline_and_agrees(tmp_path, trained_bundle, sentences):
    _skip_without("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    output = export_model(trained_bundle, "sentence-transformers", tmp_path / "st")
    exported = SentenceTransformer(str(output), device="cpu", local_files_only=True)
    vectors = exported.encode(sentences, convert_to_numpy=True, batch_size=16)
    _check_agreement(load_model(trained_bundle).embed(sentences), vectors, sentences)
    # empty sentences are zero vectors in both
    np.testing.assert_array_equal(exported.encode(["", "   "], convert_to_numpy=True), 0.0)


def test_model2vec_export_loads_offline_and_agrees(tmp_path, trained_bundle, sentences):
    _skip_without("model2vec")
    from model2vec import StaticModel

    output = export_model(trained_bundle, "model2vec", tmp_path / "m2v")
    exported = StaticModel.from_pretrained(output)
    # model2vec first cuts the text at max_length x the median piece length (in characters),
    # which can cut a sentence short of 100 pieces: the toy language's long sentences, whose
    # pieces are whole words, are such sentences (see the next test)
    limit = exported.max_length * exported.median_token_length
    kept = [s for s in sentences if len(s) <= limit]
    assert len(kept) >= len(sentences) - 3
    model = load_model(trained_bundle)
    assert max(len(model.tokenizer.processor.Encode(s.lower())) for s in kept) > 150
    psp = model.embed(kept)
    vectors = exported.encode(kept)
    _check_agreement(psp, vectors, kept)
    # model2vec drops the unknown id as psp_core does, so the vectors are equal, not just parallel
    np.testing.assert_allclose(vectors[:80], psp[:80], rtol=1e-4, atol=1e-6)


def test_unknown_pieces_count_towards_truncation_in_the_exports(tmp_path, trained_bundle, toy):
    """The one known difference: psp_core drops unknown pieces, then keeps 100; the exports keep
    100 pieces, then (in effect) drop the unknown ones."""
    _skip_without("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    sentence = "ЖЖЖ " + " ".join(toy.source_words[i % 100] for i in range(5, 150))
    model = load_model(trained_bundle)
    raw = model.tokenizer.processor.Encode(sentence.lower(), out_type=int)
    assert len(raw) > 100 and raw.count(model.tokenizer.unk_id) == 1
    first_known = [i for i in raw[:100] if i != model.tokenizer.unk_id]
    # sentence-transformers averages over all 100, the unknown piece's zero row included
    expected = model.weight.numpy()[first_known].sum(axis=0) / 100
    output = export_model(trained_bundle, "sentence-transformers", tmp_path / "st")
    vector = SentenceTransformer(str(output), device="cpu").encode([sentence])[0]
    np.testing.assert_allclose(vector, expected, rtol=1e-4, atol=1e-6)


def test_model2vec_cuts_long_text_at_max_length_median_piece_lengths(tmp_path, trained_bundle, toy):
    _skip_without("model2vec")
    from model2vec import StaticModel

    exported = StaticModel.from_pretrained(
        export_model(trained_bundle, "model2vec", tmp_path / "m2v")
    )
    limit = exported.max_length * exported.median_token_length
    sentence = " ".join(toy.source_words[i % 100] for i in range(200))
    assert len(sentence) > limit
    model = load_model(trained_bundle)
    np.testing.assert_allclose(
        exported.encode([sentence])[0], model.embed([sentence[:limit]])[0], rtol=1e-4, atol=1e-6
    )


def test_chinese_jieba_bundle_is_refused_naming_the_pretokenizer(tmp_path, model):
    _skip_without("tokenizers")
    model.config.pretokenizer = "jieba"
    bundle = model.save(tmp_path / "zh")
    for format in ("sentence-transformers", "model2vec"):
        with pytest.raises(ExportError, match="pre-tokenizer 'jieba'"):
            export_model(bundle, format, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bpe_sentencepiece_model_is_refused_naming_the_model_type(tmp_path, toy):
    _skip_without("tokenizers")
    proto = toy_sentencepiece(toy, 500, 200, model_type="bpe")
    with pytest.raises(ExportError, match="sentencepiece model type 'bpe'"):
        build_tokenizer(proto)


def test_texts_the_vocabulary_lacks_are_what_docs_exports_md_says_in_each(tmp_path, trained_bundle):
    """docs/exports.md: such a text has nothing to embed in psp_core (zero), while the exports,
    which cannot drop the word-boundary piece, give every such text that piece's direction."""
    _skip_without("sentence_transformers")
    _skip_without("model2vec")
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    texts = ["👍", "ωψχ 日本語", "🎉🎉 ☃"]
    assert not load_model(trained_bundle).embed(texts).any()
    st = export_model(trained_bundle, "sentence-transformers", tmp_path / "st")
    m2v = export_model(trained_bundle, "model2vec", tmp_path / "m2v")
    for vectors in (
        SentenceTransformer(str(st), device="cpu").encode(texts),
        StaticModel.from_pretrained(m2v).encode(texts),
    ):
        assert np.linalg.norm(vectors, axis=1).min() > 0
        np.testing.assert_allclose(cosines(vectors, vectors[[0, 0, 0]]), 1.0, rtol=1e-5)


def test_a_byte_fallback_vocabulary_exports_with_the_same_vectors(tmp_path, toy):
    """With byte fallback, a character outside the pieces is its UTF-8 bytes' pieces in psp_core
    and in both exports: texts the vocabulary lacks get vectors of their own, the same in all
    three; a literal "<0x41>" in a text is matched as characters, as sentencepiece does (where
    the vocabulary has those characters, as every vocabulary trained on text with digits does)."""
    _skip_without("sentence_transformers")
    _skip_without("model2vec")
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    from psp_core.tokenization.tokenizer import Tokenizer
    from tests.conftest import random_model

    proto = toy_sentencepiece(
        toy, 2000, 400, byte_fallback=True, character_coverage=1.0, required_chars="<>0123456789x"
    )
    model = random_model(Tokenizer(proto), dim=24)
    bundle = model.save(tmp_path / "bytes")
    words = toy.source_words
    texts = ["👍", "🎉🎉", "日本語のテキスト", "ωψχ", f"{words[0]} 👍 {words[1]}", "<0x41> <0xF0>"]
    texts += [" ".join(words[i : i + 6]) for i in range(0, 60, 6)]
    psp = model.embed(texts)
    assert psp.any(axis=1).all() and len({v.tobytes() for v in psp[:4]}) == 4
    hf = build_tokenizer(proto, max_length=0)
    for text in texts:
        assert hf.encode(text, add_special_tokens=False).ids == (
            model.tokenizer.processor.Encode(text.lower(), out_type=int)
        ), text
    st = export_model(bundle, "sentence-transformers", tmp_path / "st")
    _check_agreement(psp, SentenceTransformer(str(st), device="cpu").encode(texts), texts)
    m2v = export_model(bundle, "model2vec", tmp_path / "m2v")
    vectors = StaticModel.from_pretrained(m2v).encode(texts)
    np.testing.assert_allclose(vectors, psp, rtol=1e-4, atol=1e-6)


def test_a_sentencepiece_model_that_splits_digits_is_refused(toy):
    """The exported tokenizer would keep numbers whole where sentencepiece splits them."""
    _skip_without("tokenizers")
    proto = toy_sentencepiece(toy, 500, 200, split_digits=True)
    with pytest.raises(ExportError, match="split_digits"):
        build_tokenizer(proto)


def test_unknown_format_is_refused(tmp_path, bundle):
    with pytest.raises(ValueError, match="unknown export format 'onnx'"):
        export_model(bundle, "onnx", tmp_path / "out")


def test_cli_export(tmp_path, bundle, capsys):
    _skip_without("model2vec")
    from model2vec import StaticModel

    output = tmp_path / "cli-m2v"
    code = main(
        ["export", "--model", str(bundle), "--format", "model2vec", "--output", str(output)]
    )
    assert code == 0
    assert str(output) in capsys.readouterr().out
    assert StaticModel.from_pretrained(output).dim == 16


def test_cli_export_refusal_is_a_clean_error(tmp_path, model, capsys):
    _skip_without("tokenizers")
    model.config.pretokenizer = "jieba"
    bundle = model.save(tmp_path / "zh")
    code = main(
        ["export", "--model", str(bundle), "--format", "model2vec", "--output", str(tmp_path / "o")]
    )
    assert code != 0
    assert "jieba" in capsys.readouterr().err
