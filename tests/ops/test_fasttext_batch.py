"""ops.language_id.fasttext_batch: the batched predictor gives fastText's labels and threshold decisions."""

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from ops.language_id.fasttext_batch import (
    BatchPredictor,
    batch_predictor,
    huffman_tree,
    token_hashes,
)
from ops.language_id.fasttext_subwords import read_pruning, subword_index
from ops.language_id.langid import LanguageIdentifier, default_model_path
from ops.pairs.uint64_table import KeyIndex
from ops.sources.text_io import read_aligned
from tests.conftest import require_shared_data

SENTENCES = {
    "en": "The committee will publish its report at the end of the month, said the chairman.",
    "de": "Der Ausschuss wird seinen Bericht Ende des Monats veröffentlichen, sagte der Vorsitzende.",
    "fr": "Le comité publiera son rapport à la fin du mois, a déclaré le président.",
    "es": "El comité publicará su informe a finales de mes, dijo el presidente.",
    "ru": "Комитет опубликует свой доклад в конце месяца, заявил председатель.",
    "tr": "Komite raporunu ay sonunda yayımlayacak, dedi başkan.",
}
# lines fastText reads differently from a plain split, and other corners
UNUSUAL = [
    "",
    "   ",
    "\t\r\v\f",
    "a",
    "Das Haus </s> is a house in English",
    "This is __label__de clearly English text",
    "__label__en",
    "Der\x00Ausschuss wird seinen Bericht veröffentlichen",
    "word\u00a0joined by a no-break space",
    "今天天气很好，我们去海滩。",
    "Сегодня прекрасная погода, и мы идём на пляж.",
    "https://example.com/a/very/long/path/that/is/one/token/of/more/than/sixty-four/bytes/x",
    "!!! ??? ... ,,, 123 456",
    "🙂 🙂 🙂",
]


def mixed_lines(n: int, seed: int) -> list[str]:
    """Lines of words drawn from one or two languages' sentences: clear and unclear cases."""
    rng = random.Random(seed)
    words = {lang: text.split() for lang, text in SENTENCES.items()}
    lines = []
    for _ in range(n):
        first, second = rng.sample(sorted(words), 2)
        pool = words[first] * rng.randint(1, 4) + words[second] * rng.randint(0, 2)
        line = rng.sample(pool, rng.randint(1, min(len(pool), 25)))
        if rng.random() < 0.2:  # a made-up word: a new token with its own n-grams
            line.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyzäöüß") for _ in range(9)))
        lines.append(" ".join(line))
    return lines


@pytest.fixture(scope="module")
def lid_model():
    import fasttext

    return fasttext.load_model(str(default_model_path()))


def fasttext_answers(model, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    labels, probs = model.f.multilinePredict([line + "\n" for line in lines], 1, 0.0, "strict")
    index = {label: i for i, label in enumerate(model.labels)}
    return np.array([index[label[0]] for label in labels]), np.concatenate(probs)


def assert_same_as_fasttext(predictor: BatchPredictor, model, lines: list[str], batch: int) -> None:
    expected_labels, expected_probs = fasttext_answers(model, lines)
    for start in range(0, len(lines), batch):
        chunk = lines[start : start + batch]
        labels, probs = predictor.predict(pa.array(chunk, pa.string()), (0.5,))
        np.testing.assert_array_equal(labels, expected_labels[start : start + batch])
        np.testing.assert_allclose(probs, expected_probs[start : start + batch], atol=1e-5)
        kept = probs >= 0.5
        np.testing.assert_array_equal(kept, expected_probs[start : start + batch] >= 0.5)


@pytest.mark.parametrize(
    "vectorized_subwords", [True, False], ids=["numpy-subwords", "getSubwords"]
)
def test_lid176_labels_and_probabilities_are_fasttexts(lid_model, vectorized_subwords) -> None:
    predictor = batch_predictor(lid_model, default_model_path() if vectorized_subwords else None)
    assert predictor is not None
    assert (predictor._subwords is not None) == vectorized_subwords
    lines = mixed_lines(3000, seed=1) + UNUSUAL + mixed_lines(3000, seed=2) + UNUSUAL
    assert_same_as_fasttext(predictor, lid_model, lines, batch=1000)
    # the token cache is warm now: the same lines again, in other batches
    assert_same_as_fasttext(predictor, lid_model, lines[::-1], batch=777)


def test_most_clear_lines_take_the_fast_path(lid_model) -> None:
    # guards against a predictor that would pass the other tests by sending every line back
    predictor = batch_predictor(lid_model, default_model_path())
    lines = [SENTENCES[lang] for lang in SENTENCES] * 50
    sent_back: list[int] = []
    original = predictor._fasttext
    predictor._fasttext = lambda subset: (sent_back.append(len(subset)), original(subset))[1]
    labels, _ = predictor.predict(pa.array(lines))
    assert sum(sent_back) == 0
    assert [lid_model.labels[i] for i in labels[:6]] == [f"__label__{c}" for c in SENTENCES]


def test_lines_near_a_threshold_are_decided_by_fasttext(lid_model) -> None:
    predictor = batch_predictor(lid_model, default_model_path())
    lines = mixed_lines(400, seed=3)
    _, expected = fasttext_answers(lid_model, lines)
    _, fast = predictor.predict(pa.array(lines))
    clear = np.flatnonzero(fast >= predictor.sure)
    assert len(clear) > 100
    # a threshold right at a line's fastText probability: that line must get fastText's own
    # (bit-identical) probability, so `prob >= threshold` is decided as fastText would
    for row in clear[:20]:
        _, probs = predictor.predict(pa.array(lines), (float(expected[row]),))
        assert probs[row] == expected[row]


def test_a_small_token_cache_starts_again_and_stays_exact(lid_model) -> None:
    subwords = subword_index(lid_model, default_model_path())
    predictor = BatchPredictor(lid_model, subwords=subwords, max_cached_tokens=300)
    lines = mixed_lines(1500, seed=4)
    assert_same_as_fasttext(predictor, lid_model, lines, batch=100)
    assert len(predictor._tokens) <= 300


def test_new_tokens_computed_a_slice_at_a_time_give_the_same_cache(lid_model, monkeypatch) -> None:
    import ops.language_id.fasttext_batch

    lines = pa.array(mixed_lines(2000, seed=5) + UNUSUAL, pa.string())
    whole = batch_predictor(lid_model, default_model_path())
    expected = whole.predict(lines, (0.5,))
    monkeypatch.setattr(ops.language_id.fasttext_batch, "NEW_TOKEN_SLICE", 7)
    sliced = batch_predictor(lid_model, default_model_path())
    added: list[int] = []
    original = sliced._add_tokens
    sliced._add_tokens = lambda ids, words: (added.append(len(words)), original(ids, words))[1]
    labels, probs = sliced.predict(lines, (0.5,))
    assert len(added) > 10 and max(added) == 7
    np.testing.assert_array_equal(labels, expected[0])
    np.testing.assert_array_equal(probs, expected[1])
    n = len(whole._tokens)
    assert len(sliced._tokens) == n
    np.testing.assert_array_equal(sliced._sums[:n], whole._sums[:n])
    np.testing.assert_array_equal(sliced._counts[:n], whole._counts[:n])


@pytest.fixture(scope="module")
def training_file(tmp_path_factory) -> Path:
    """One language per line, unequal label counts (a lopsided Huffman tree)."""
    path = tmp_path_factory.mktemp("fasttext") / "train.txt"
    rng = random.Random(0)
    with path.open("w") as handle:
        for lang, text in SENTENCES.items():
            words = text.split()
            for _ in range(rng.randint(100, 600)):
                line = " ".join(rng.sample(words, rng.randint(2, len(words))))
                handle.write(f"__label__{lang} {line}\n")
    return path


TRAIN = """
import sys, numpy as np, fasttext
data, out, quantize = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
# the dense model has one-character n-grams (fastText skips "<" and ">" alone) and longer ones
minn, maxn = (2, 4) if quantize else (1, 5)
model = fasttext.train_supervised(data, loss="hs", dim=8, minn=minn, maxn=maxn, bucket=20000,
                                  epoch=20, lr=0.3, thread=1, seed=1, verbose=0)
if quantize:  # pruned n-grams, product-quantized input rows with quantized norms
    model.quantize(input=data, qnorm=True, cutoff=2000, retrain=False)
model.f.multilinePredict(open(data).read().replace("__label__", "").splitlines(), 1, 0.0, "strict")
assert np.isfinite(np.array(model.f.getOutputMatrix())).all()
model.save_model(out)
"""


@pytest.fixture(scope="module", params=["dense", "quantized"])
def trained_model(request, training_file: Path, tmp_path_factory):
    """A small lid-like model trained here, with its file: as trained (every n-gram bucket
    kept, dense rows, n-grams of 1 to 5 characters), or quantized (pruned n-grams of 2 to 4
    characters, product-quantized rows and norms).

    Trained in a fresh process, tried up to 5 times: fastText's trainer in this binding
    sometimes stops with "Encountered NaN" on small data, or leaves weights whose own predict
    raises, even with a fixed seed and one thread, and once it does in a process it keeps
    doing so there."""
    import fasttext

    quantize = request.param == "quantized"
    path = tmp_path_factory.mktemp("model") / ("model.ftz" if quantize else "model.bin")
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", TRAIN, str(training_file), str(path), str(int(quantize))],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return fasttext.load_model(str(path)), path
    raise AssertionError(f"fastText did not train a sound model in 5 tries: {done.stderr[-500:]}")


def test_a_model_trained_here_dense_or_quantized(trained_model) -> None:
    model, path = trained_model
    predictor = batch_predictor(model, path)
    assert predictor is not None and predictor._subwords is not None
    lines = mixed_lines(2000, seed=5) + UNUSUAL
    assert_same_as_fasttext(predictor, model, lines, batch=500)
    _, probs = predictor.predict(pa.array([SENTENCES[lang] for lang in SENTENCES]))
    assert (probs >= predictor.sure).sum() >= 4  # the model is sure enough for the fast path


class StandInArgs:
    """The parts of fastText's ``args`` that :func:`batch_predictor` looks at."""

    def __init__(self, model="supervised", loss="hs", wordNgrams=1, qout=False) -> None:
        self.model, self.loss = SimpleNamespace(name=model), SimpleNamespace(name=loss)
        self.wordNgrams, self.qout = wordNgrams, qout


@pytest.mark.parametrize(
    ("args", "quantized", "eos_id"),
    [
        (StandInArgs(loss="softmax"), False, 0),
        (StandInArgs(loss="ns"), False, 0),
        (StandInArgs(wordNgrams=2), False, 0),
        (StandInArgs(model="skipgram"), False, 0),
        (StandInArgs(qout=True), True, 0),
        (StandInArgs(), False, -1),
    ],
    ids=["softmax", "negative-sampling", "word-bigrams", "unsupervised", "quantized-out", "no-eos"],
)
def test_models_it_does_not_reproduce_are_left_to_fasttext(args, quantized, eos_id) -> None:
    stand_in = SimpleNamespace(
        f=SimpleNamespace(getArgs=lambda: args, isQuant=lambda: quantized),
        get_word_id=lambda word: eos_id,
    )
    assert batch_predictor(stand_in) is None


def test_the_identifier_can_use_fasttext_for_every_line() -> None:
    identifier = LanguageIdentifier(batched=False)
    assert identifier._batch is None
    codes, probs = identifier.predict([SENTENCES["de"], SENTENCES["ru"]])
    assert codes == ["de", "ru"] and (probs > 0.5).all()


def subword_tokens() -> pa.Array:
    """Tokens of every kind: words in the vocabulary, made-up words, one and two characters,
    every UTF-8 length, BOW/EOW look-alikes, bytes that are negative as int8."""
    rng = random.Random(7)
    tokens = {word for line in mixed_lines(500, seed=8) for word in line.split()}
    tokens |= {"a", "é", "中", "🙂", "<", ">", "<a>", "de", "the", "Ω≈ç√", "x" * 70, "</s>x"}
    alphabet = "ab<>éÿĀЖ中￿🙂􏿽"
    tokens |= {"".join(rng.choices(alphabet, k=rng.randint(1, 9))) for _ in range(3000)}
    return pa.array(sorted(tokens))


def assert_same_subwords(model, path) -> None:
    index = subword_index(model, path)
    assert index is not None
    tokens = subword_tokens()
    flat, counts = index.ids(tokens)
    starts = np.r_[0, np.cumsum(counts)]
    for i, token in enumerate(tokens.to_pylist()):
        expected = np.sort(np.asarray(model.f.getSubwords(token, "strict")[1], dtype=np.int64))
        assert np.array_equal(np.sort(flat[starts[i] : starts[i + 1]]), expected), token


def test_subword_ids_are_fasttexts_for_lid176(lid_model) -> None:
    assert_same_subwords(lid_model, default_model_path())


def test_subword_ids_are_fasttexts_for_a_model_trained_here(trained_model) -> None:
    assert_same_subwords(*trained_model)


def test_a_file_in_another_format_has_no_pruning_map(tmp_path: Path, lid_model) -> None:
    other = tmp_path / "not-fasttext.bin"
    other.write_bytes(b"\x00" * 200)
    assert read_pruning(other) is None
    assert subword_index(lid_model, other) is None
    size, hashes, rows = read_pruning(default_model_path())
    assert size == len(hashes) == len(rows) > 0


def test_huffman_tree_matches_fasttexts_construction() -> None:
    # counts sorted decreasing, as fastText's dictionary stores labels: 5, 3, 2, 1. Each new
    # node takes the two smallest counts, a leaf only when it is strictly smaller than the
    # next internal node: 4 = {3 (1), 2 (2)} = 3; 5 = {4 (3), 1 (3)}, the tie going to the
    # node; root 6 = {0 (5), 5 (6)}
    left, right, depth = huffman_tree(np.array([5, 3, 2, 1]))
    assert (left[4], right[4]) == (3, 2)
    assert (left[5], right[5]) == (4, 1)
    assert (left[6], right[6]) == (0, 5)
    assert depth == 3


def test_token_hashes_tell_tokens_apart_and_ignore_where_they_sit() -> None:
    rng = random.Random(6)
    alphabet = "abc\u00e9\u0416\u4e2d🙂"
    tokens = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(20_000)})
    hashes = token_hashes(pa.array(tokens))
    assert len(set(hashes.tolist())) == len(tokens)
    shifted = pa.array(["x", "y", *tokens]).slice(2)  # a non-zero offset into the buffers
    np.testing.assert_array_equal(token_hashes(shifted), hashes)
    assert token_hashes(pa.array(["ab"]))[0] != token_hashes(pa.array(["ba"]))[0]


def test_key_index_numbers_keys_in_first_seen_order() -> None:
    index = KeyIndex(capacity=8)
    ids, new = index.ids(np.array([10, 0, 7], dtype=np.uint64))
    assert ids.tolist() == [0, 1, 2] and new.all()
    keys = np.arange(1, 5000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # grows the table
    ids, new = index.ids(keys)
    again, new_again = index.ids(np.concatenate([keys[::-1], np.array([7], np.uint64)]))
    assert np.array_equal(again[:-1], ids[::-1]) and again[-1] == 2 and not new_again.any()
    assert len(index) == 3 + len(keys) - int((~new).sum())
    index.clear()
    assert len(index) == 0 and index.ids(np.array([7], np.uint64))[0].tolist() == [0]


@pytest.mark.real_data
@pytest.mark.parametrize("lang", ["de", "ru", "zh"])
def test_real_bitext_gets_fasttexts_answers(lang: str, lid_model) -> None:
    folder = require_shared_data("bitext", f"en-{lang}")
    pairs = read_aligned(folder / "combined.en.gz", folder / f"combined.{lang}.gz")
    lines = [line for pair, _ in zip(pairs, range(6000), strict=False) for line in pair]
    assert_same_as_fasttext(batch_predictor(lid_model), lid_model, lines, batch=4096)
