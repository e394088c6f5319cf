from pathlib import Path

import numpy as np
import pytest

from ops.langid import LanguageIdentifier, _check_binding, filter_language, lid_language
from ops.pair_files import PairWriter, iter_pair_chunks, iter_pairs
from ops.text_io import read_aligned
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


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


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
