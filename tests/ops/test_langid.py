from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ops.language_id.langid import (
    RULES,
    LanguageIdentifier,
    LanguageRule,
    _check_binding,
    default_model_path,
    filter_language,
    lid_language,
    strip_arabic_marks,
)
from ops.pairs.pair_files import PairWriter, iter_pair_chunks, iter_pairs
from ops.sources.text_io import read_aligned
from tests.conftest import require_shared_data

EN = [
    "The weather is lovely today and we are going to the beach.",
    "The committee will publish its report at the end of the month.",
    "She has been working at the hospital for more than ten years.",
]
DE = [
    "Das Wetter ist heute schön und wir gehen an den Strand.",
    "Der Ausschuss wird seinen Bericht Ende des Monats veröffentlichen.",
    "Sie arbeitet seit mehr als zehn Jahren im Krankenhaus.",
]

# Tanzil's fully vowelled Quranic Arabic ("You and your ancient forefathers"): fastText itself
# labels it Mazanderani (0.61); without the marks it is Arabic (0.99)
QURAN = (
    "\u0623\u064e\u0646\u062a\u064f\u0645\u06e1 \u0648\u064e\u0621\u064e\u0627\u0628"
    "\u064e\u0627\u0653\u0624\u064f\u0643\u064f\u0645\u064f \u0671\u0644\u06e1\u0623"
    "\u064e\u0642\u06e1\u062f\u064e\u0645\u064f\u0648\u0646\u064e"
)
HAN_ONLY = "当地人努力抗争。"  # "Local people fought hard.": fastText says ja 0.60, zh 0.40
JAPANESE = "今日はいい天気ですね。"


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


@pytest.fixture(scope="module")
def fasttext_model():
    import fasttext

    return fasttext.load_model(str(default_model_path()))


def write_pairs(path: Path, pairs, *, src_lang="en", tgt_lang="de", scores=None) -> Path:
    with PairWriter(path, src_lang=src_lang, tgt_lang=tgt_lang, with_score=scores is not None) as w:
        w.write([p[0] for p in pairs], [p[1] for p in pairs], scores)
    return path


@pytest.mark.parametrize(
    ("code", "label"),
    [("en", "en"), ("zh_cn", "zh"), ("zh-TW", "zh"), ("pt_br", "pt"), ("DE", "de"), ("nb", "no")],
)
def test_language_codes_map_to_lid_labels(code: str, label: str) -> None:
    assert lid_language(code) == label


def test_predict_is_batched_and_newline_safe(identifier: LanguageIdentifier) -> None:
    lines = [
        EN[0],
        DE[0],
        "Il fait beau aujourd'hui et nous allons à la plage.",
        "今天天气很好，我们去海滩。",
        "Сегодня прекрасная погода, и мы идём на пляж.",
        "this line has\na newline inside it, which fastText refuses",
    ]
    codes, probs = identifier.predict(lines)
    assert codes == ["en", "de", "fr", "zh", "ru", "en"]
    assert probs.dtype == np.float32 and probs.shape == (6,) and (probs > 0.8).all()
    empty_codes, empty_probs = identifier.predict([])
    assert empty_codes == [] and empty_probs.shape == (0,)


def test_identifier_pickles_by_path(identifier: LanguageIdentifier) -> None:
    # what pickling hands a worker process: the path and the mode, the model is loaded there
    state = identifier.__getstate__()
    assert state == {"model_path": str(identifier.model_path), "batched": True}
    clone = LanguageIdentifier.__new__(LanguageIdentifier)
    clone.__setstate__(state)
    assert clone.model_path == identifier.model_path
    assert clone.predict(DE)[0] == ["de", "de", "de"]


def test_a_foreign_fasttext_binding_is_a_clear_error() -> None:
    # fasttext-predict's module has the same name; its batch predict returns one tuple per line
    class PredictOnlyBuild:
        def predict(self, lines, k=1):
            return [(("__label__en",), (0.9,)) for _ in lines]

    with pytest.raises(RuntimeError, match="force-reinstall --no-deps fasttext-numpy2"):
        _check_binding(PredictOnlyBuild())


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="lid.176.bin"):
        LanguageIdentifier(tmp_path / "lid.176.bin")


def test_filter_language_drops_with_reasons(tmp_path: Path, identifier) -> None:
    pairs = [
        (EN[0], DE[0]),  # kept
        (DE[1], DE[1]),  # German on the English side
        (EN[1], EN[2]),  # English on the German side
        (EN[2], DE[2]),  # kept
        (DE[0], EN[0]),  # both wrong: counted once, as the source side
    ]
    source = write_pairs(tmp_path / "in.parquet", pairs, scores=[0.1, 0.2, 0.3, 0.4, 0.5])
    report = filter_language(source, tmp_path / "out.parquet", identifier=identifier)
    assert report.as_dict()["dropped"] == {"src_not_en": 2, "tgt_not_de": 1}
    assert (report.n_in, report.n_out) == (5, 2)
    kept = list(iter_pair_chunks(tmp_path / "out.parquet"))
    assert kept[0][0] == [EN[0], EN[2]] and kept[0][2] == pytest.approx([0.1, 0.4])


def test_thresholds_per_language_and_low_confidence(tmp_path: Path, identifier) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(EN[0], DE[0]), (DE[1], DE[1])])
    strict = {"en": 0.5, "de": 1.01}  # no German prediction can reach 1.01
    report = filter_language(
        source, tmp_path / "out.parquet", identifier=identifier, threshold=strict
    )
    assert report.as_dict()["dropped"] == {"low_confidence": 1, "src_not_en": 1}
    with pytest.raises(ValueError, match="no entry for 'de'"):
        filter_language(
            source, tmp_path / "x.parquet", identifier=identifier, threshold={"en": 0.5}
        )


def test_unknown_language_is_refused(tmp_path: Path, identifier) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(EN[0], DE[0])], tgt_lang="xx")
    with pytest.raises(ValueError, match="tgt_lang 'xx' is not a language"):
        filter_language(source, tmp_path / "out.parquet", identifier=identifier)


def test_workers_give_the_same_output_in_order(tmp_path: Path, identifier) -> None:
    pairs = [(EN[i % 3], DE[(i * 7) % 3] if i % 5 else EN[1]) for i in range(300)]
    source = write_pairs(tmp_path / "in.parquet", pairs)
    one = filter_language(source, tmp_path / "one.parquet", identifier=identifier, batch_size=64)
    two = filter_language(
        source, tmp_path / "two.parquet", identifier=identifier, batch_size=64, workers=2
    )
    assert one.as_dict()["dropped"] == two.as_dict()["dropped"] == {"tgt_not_de": 60}
    assert list(iter_pairs(tmp_path / "one.parquet")) == list(iter_pairs(tmp_path / "two.parquet"))


@pytest.mark.real_data
@pytest.mark.parametrize("lang", ["de", "zh"])
def test_real_bitext_is_mostly_kept(tmp_path: Path, identifier, lang: str) -> None:
    folder = require_shared_data("bitext", f"en-{lang}")
    pairs = []
    for pair in read_aligned(folder / "combined.en.gz", folder / f"combined.{lang}.gz"):
        pairs.append(pair)
        if len(pairs) == 20_000:
            break
    source = write_pairs(tmp_path / "in.parquet", pairs, tgt_lang=lang)
    report = filter_language(source, tmp_path / "out.parquet", identifier=identifier)
    assert report.n_out > 0.9 * report.n_in
    assert set(report.dropped) <= {"src_not_en", f"tgt_not_{lang}", "low_confidence"}


# (English side, other side, its language, kept by the rules "threshold" (0.5, the rule before
# its rule), "top_label" (the reference's ParaNMT rule) and "other_language" (the default))
PAIRS = [
    pytest.param(
        "Lucrative business", "Lukratives Geschäft", "de", (False, False, True),
        id="short German, top label en 0.34 (de 0.32)",
    ),
    pytest.param(
        "Better than expected", "Besser als erwartet", "de", (False, False, True),
        id="short German, top label nl 0.63 (de 0.37)",
    ),
    pytest.param(
        "Europe's most beautiful pools", "Europas schönste Pools", "de", (False, True, True),
        id="short German, top label de 0.31",
    ),
    pytest.param(
        "I don't know.", "Ich weiß es nicht.", "de", (True, True, True), id="short German, clear"
    ),
    pytest.param(
        "What happened?", "Что случилось?", "ru", (True, True, True), id="short Russian, clear"
    ),
    pytest.param(
        "I don't know.", "Je ne sais pas.", "de", (False, False, False), id="French in en-de"
    ),
    pytest.param(
        "Good idea.", "Bonne idée.", "de", (False, False, False), id="short French in en-de"
    ),
    pytest.param(
        "What happened?", "I don't know.", "de", (False, False, False), id="English in en-de"
    ),
    pytest.param(
        "Was ist passiert?", "Ich weiß es nicht.", "de", (False, False, False),
        id="German on the English side",
    ),
    pytest.param(
        "A gradual easing", "Un alivio gradual", "es", (False, False, False),
        id="short Spanish every rule drops: it 0.51, es 0.04",
    ),
    pytest.param(
        "You and your ancient forefathers", QURAN, "ar", (True, True, True),
        id="vowelled Quranic Arabic",
    ),
    pytest.param(
        "Local people fought hard.", HAN_ONLY, "zh", (True, True, True),
        id="Chinese without kana that fastText calls ja",
    ),
    pytest.param(
        "It is nice weather today, isn't it?", JAPANESE, "zh", (False, False, False),
        id="Japanese in en-zh",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("english", "other", "lang", "kept"), PAIRS)
def test_which_rule_keeps_which_pair(
    tmp_path: Path, identifier, english: str, other: str, lang: str, kept: tuple[bool, ...]
) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(english, other)], tgt_lang=lang)
    outcome = {}
    for name in RULES:
        report = filter_language(
            source, tmp_path / f"{name}.parquet", identifier=identifier, rule=LanguageRule(name)
        )
        outcome[name] = report.n_out == 1
    assert outcome == dict(zip(("threshold", "top_label", "other_language"), kept, strict=True))


NAN = float("nan")


@pytest.mark.parametrize(
    ("right", "top_p", "own", "threshold", "top_label", "other_language"),
    [
        (True, 0.9, NAN, True, True, True),
        (True, 0.2, NAN, False, True, True),
        (False, 0.9, 0.05, False, False, False),  # another language is sure: dropped
        (False, 0.9, 0.1, False, False, True),  # ... unless its own language has p >= 0.1
        (False, 0.35, 0.0999, False, False, False),
        (False, 0.3499, NAN, False, False, True),  # no other language reaches 0.35
    ],
)
def test_rule_decisions(right, top_p, own, threshold, top_label, other_language) -> None:
    as_arrays = np.array([right]), np.array([top_p], np.float32), np.array([own], np.float32)
    for rule, expected in zip(RULES, (other_language, top_label, threshold), strict=True):
        assert LanguageRule(rule).passes(*as_arrays)[0] == expected, rule
    asks = LanguageRule().needs_own_probability(as_arrays[0], as_arrays[1])[0]
    assert asks == (not right and top_p >= 0.35)


def test_rule_settings_are_checked(tmp_path: Path, identifier) -> None:
    with pytest.raises(ValueError, match="'majority' is not one of"):
        LanguageRule("majority")
    for bad in (-0.1, NAN, "0.3", True):
        with pytest.raises(ValueError, match="other_p must be a probability"):
            LanguageRule(other_p=bad)
    source = write_pairs(tmp_path / "in.parquet", [(EN[0], DE[0])])
    with pytest.raises(ValueError, match="either rule= or threshold="):
        filter_language(
            source,
            tmp_path / "x.parquet",
            identifier=identifier,
            rule=LanguageRule(),
            threshold=0.5,
        )


def test_arabic_marks_are_stripped_and_kana_less_japanese_is_chinese(
    identifier, fasttext_model
) -> None:
    vowelled = "\u0648\u064e\u0671\u0644\u0637\u0651\u064f\u0648\u0631\u0650"  # wa-t-tur
    plain = strip_arabic_marks(pa.array([vowelled, "Das Haus", None, "ـــ"]))
    assert plain.to_pylist() == ["\u0648\u0627\u0644\u0637\u0648\u0631", "Das Haus", "", ""]
    untouched = pa.array(["no Arabic here", "Ünïcödé"])
    assert strip_arabic_marks(untouched) is untouched
    lines = [QURAN, HAN_ONLY, JAPANESE]
    fasttext_labels = [labels[0] for labels in fasttext_model.predict(lines)[0]]
    assert fasttext_labels == ["__label__mzn", "__label__ja", "__label__ja"]
    assert identifier.predict(lines)[0] == ["ar", "zh", "ja"]
    assert LanguageIdentifier(batched=False).predict(lines)[0] == ["ar", "zh", "ja"]


def test_label_probability_is_fasttexts(identifier, fasttext_model) -> None:
    lines = [*EN, *DE, "Lukratives Geschäft", "Besser als erwartet", HAN_ONLY, QURAN, ""]
    text = strip_arabic_marks(pa.array(lines)).to_pylist()
    labels, probs = fasttext_model.predict(text, k=-1, threshold=0.0)
    unbatched = LanguageIdentifier(batched=False)
    for code in ("de", "en", "zh", "ar"):
        expected = np.array(
            [
                dict(zip(names, p, strict=True)).get(f"__label__{code}", 0.0)
                for names, p in zip(labels, probs, strict=True)
            ]
        )
        batched = identifier.label_probability(pa.array(lines), code)
        np.testing.assert_allclose(batched, expected, atol=1e-5)  # fastText omits p < 1e-5
        np.testing.assert_array_equal(
            unbatched.label_probability(pa.array(lines), code), expected.astype(np.float32)
        )
        # a threshold right at fastText's figure: that line gets fastText's own, bit for bit
        row = int(np.argmax(expected))
        guarded = identifier.label_probability(pa.array(lines), code, (float(expected[row]),))
        assert guarded[row] == np.float32(expected[row])


def test_paranmt_keeps_pairs_whose_top_label_is_english_on_both_sides(tmp_path, identifier):
    # the reference's ParaNMT rule (top label English on both sides, any probability), which
    # drops a short English line that lid.176 calls Italian; other_language would keep it
    where_to = "Where to go?"  # it 0.77, en 0.12
    pairs = [(EN[0], EN[1]), (where_to, EN[2]), (EN[2], "Wohin gehen wir?"), (EN[1], EN[0])]
    source = write_pairs(tmp_path / "in.parquet", pairs, tgt_lang="en", scores=[0.5] * 4)
    out = tmp_path / "out.parquet"
    report = filter_language(source, out, identifier=identifier, rule=LanguageRule("top_label"))
    assert report.as_dict()["dropped"] == {"src_not_en": 1, "tgt_not_en": 1}
    assert list(iter_pairs(out)) == [pairs[0], pairs[3]]
    lenient = filter_language(source, out, identifier=identifier, rule=LanguageRule())
    assert lenient.as_dict()["dropped"] == {"tgt_not_en": 1}


SHARED_LANGUAGES = ("de", "fr", "ru", "zh", "es", "ar", "tr")
ISSUE_13_LANGUAGES = ("de", "fr", "ru", "es", "ar", "tr")  # the pairs the issue measured


@pytest.mark.slow
@pytest.mark.real_data
def test_real_short_pairs_are_kept_and_wrong_language_pairs_dropped(tmp_path: Path, identifier):
    """Issue 13's targets on the shared bitext, with the default rule: >= 97% of the correct
    pairs of 3-5 English tokens kept for each pair the issue measured (zh, not measured there:
    >= 96%), >= 97% of longer ones, and >= 90% of wrong-language pairs dropped in every length
    bucket: the non-English side replaced by a line of another shared language or by an English
    line, or the English side by a non-English line, of the same length bucket (as
    benchmarks/langid_rules.py builds them). All short pairs, 400 of each longer bucket."""
    require_shared_data("bitext", "en-de")
    rng = np.random.default_rng(13)
    buckets: dict[str, list[tuple[list[str], list[str]]]] = {}
    for lang in SHARED_LANGUAGES:
        folder = require_shared_data("bitext", f"en-{lang}")
        pairs = list(read_aligned(folder / "combined.en.gz", folder / f"combined.{lang}.gz"))
        tokens = np.array([len(english.split()) for english, _ in pairs])
        buckets[lang] = []
        for low, high, most in ((3, 5, None), (6, 10, 400), (11, 10**9, 400)):
            rows = np.flatnonzero((tokens >= low) & (tokens <= high))
            if most is not None:
                rows = rng.choice(rows, most, replace=False)
            buckets[lang].append(([pairs[i][0] for i in rows], [pairs[i][1] for i in rows]))

    def lines_of(langs: list[str], side: int, bucket: int, n: int) -> list[str]:
        picked = rng.choice(langs, n)
        return [
            buckets[x][bucket][side][rng.integers(len(buckets[x][bucket][side]))] for x in picked
        ]

    kept, dropped = {}, {}
    for lang in SHARED_LANGUAGES:
        others = [x for x in SHARED_LANGUAGES if x != lang]
        for bucket, (english, other) in enumerate(buckets[lang]):
            n = len(english)
            kinds = {
                "correct": (english, other),
                "tgt_other": (english, lines_of(others, 1, bucket, n)),
                "tgt_english": (english, lines_of(list(SHARED_LANGUAGES), 0, bucket, n)),
                "src_foreign": (lines_of(list(SHARED_LANGUAGES), 1, bucket, n), other),
            }
            for kind, (src, tgt) in kinds.items():
                source = write_pairs(
                    tmp_path / "in.parquet", list(zip(src, tgt, strict=True)), tgt_lang=lang
                )
                report = filter_language(source, tmp_path / "out.parquet", identifier=identifier)
                if kind == "correct":
                    kept[lang, bucket] = report.n_out / n
                else:
                    dropped[lang, bucket, kind] = 1 - report.n_out / n
    short = {lang: round(100 * kept[lang, 0], 1) for lang in SHARED_LANGUAGES}
    assert all(short[lang] >= 97 for lang in ISSUE_13_LANGUAGES) and short["zh"] >= 96, short
    assert min(v for (_, bucket), v in kept.items() if bucket) >= 0.97, kept
    percent = {key: round(100 * value, 1) for key, value in dropped.items()}
    assert min(percent.values()) >= 90, percent
