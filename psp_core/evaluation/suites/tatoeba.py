"""``tatoeba``: Tatoeba similarity search (LASER's test sets), the error rate of
nearest-neighbour retrieval, for each language LASER has (lower is better).

For a language ``xxx`` the files ``tatoeba/xxx-eng.xxx`` and ``tatoeba/xxx-eng.eng`` are
line-aligned translations. Every ``xxx`` sentence retrieves its nearest English sentence
(``xx->en``) and every English sentence its nearest ``xxx`` sentence (``en->xx``); a retrieval
is an error when it is not the aligned line (by index, as LASER counts it). The paper's numbers
are taken as the mean of both directions, in %, by cosine (this project's reading of the
paper; the reference code has no Tatoeba evaluation to check the convention against), so both
directions are reported and their mean is the column beside the paper's. The ratio margin of
:mod:`psp_core.bitext_mining` (k = 4) is reported beside it.

``psp fetch-eval-data`` downloads LASER's v1 files (``tatoeba.xxx-eng.{xxx,eng}``) and copies
them to ``tatoeba/xxx-eng.{xxx,eng}``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from psp_core.evaluation.retrieval import error_rate
from psp_core.evaluation.suite import (
    Column,
    DevDataset,
    EvalSource,
    Score,
    Suite,
    SuiteRun,
    Table,
    register,
)
from psp_core.evaluation.suites._correlations import fmt, rounded

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

#: The paper's Tatoeba languages (ISO 639-3, as in LASER's file names).
PAPER_TATOEBA_LANGUAGES = ("ara", "deu", "spa", "fra", "rus", "tur")
#: Tatoeba error rate %, mean of both directions, keyed by LASER's ISO 639-3 codes.
PAPER_TATOEBA = {"ara": 8.8, "deu": 1.5, "spa": 2.4, "fra": 5.4, "rus": 5.6, "tur": 1.4}
MARGIN_K = 4
#: ISO 639-1 (our partition codes, region suffix ignored) -> LASER's Tatoeba 3-letter codes.
LASER_CODES: dict[str, str] = {
    "ar": "ara", "bg": "bul", "de": "deu", "el": "ell", "es": "spa", "fr": "fra", "he": "heb",
    "hi": "hin", "it": "ita", "ja": "jpn", "ko": "kor", "nl": "nld", "pl": "pol", "pt": "por",
    "ru": "rus", "tr": "tur", "uk": "ukr", "vi": "vie", "zh": "cmn",
}  # fmt: skip
LASER_TATOEBA = "https://raw.githubusercontent.com/facebookresearch/LASER/main/data/tatoeba/v1"
#: LASER's Tatoeba v1 languages downloaded: the paper's six and those in the shared data.
TATOEBA_LANGUAGES = (
    "ara", "deu", "spa", "fra", "rus", "tur",
    "ita", "nld", "por", "pol", "ukr", "jpn", "kor", "heb", "hin", "vie", "ell", "bul",
)  # fmt: skip
_LASER_FILE = re.compile(r"^tatoeba\.(?P<lang>[a-z]{3})-eng\.(?P<side>[a-z]{3})$")


@dataclass(frozen=True)
class TatoebaScore:
    """Error rates in % of one language, by cosine and by ratio margin."""

    n: int
    cosine_xx_en: float
    cosine_en_xx: float
    margin_xx_en: float
    margin_en_xx: float

    @property
    def cosine_mean(self) -> float:
        return (self.cosine_xx_en + self.cosine_en_xx) / 2.0

    @property
    def margin_mean(self) -> float:
        return (self.margin_xx_en + self.margin_en_xx) / 2.0

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "cosine_xx_en": self.cosine_xx_en,
            "cosine_en_xx": self.cosine_en_xx,
            "cosine_mean": self.cosine_mean,
            "margin_xx_en": self.margin_xx_en,
            "margin_en_xx": self.margin_en_xx,
            "margin_mean": self.margin_mean,
        }


def tatoeba_errors(
    other: np.ndarray, english: np.ndarray, *, k: int = MARGIN_K, block_size: int = 4096
) -> TatoebaScore:
    """Error rates of aligned embeddings (row ``i`` of both are translations)."""
    if len(other) != len(english):
        raise ValueError(f"{len(other)} sentences against {len(english)} English sentences")
    from psp_core.bitext_mining import margin_best, neighbourhoods  # torch: imported when used

    hoods = neighbourhoods(other, english, k, block_size=block_size, backend="torch")
    return TatoebaScore(
        n=len(other),
        cosine_xx_en=error_rate(hoods.forward_indices[:, 0]),
        cosine_en_xx=error_rate(hoods.backward_indices[:, 0]),
        margin_xx_en=error_rate(margin_best(hoods, "forward")[0]),
        margin_en_xx=error_rate(margin_best(hoods, "backward")[0]),
    )


def read_tatoeba(directory: str | Path, language: str) -> tuple[list[str], list[str]]:
    """The aligned ``(xxx sentences, English sentences)`` of ``directory/xxx-eng.{xxx,eng}``."""
    directory = Path(directory)
    other_path = directory / f"{language}-eng.{language}"
    english_path = directory / f"{language}-eng.eng"
    sides = []
    for path in (other_path, english_path):
        with open(path, encoding="utf-8") as handle:
            sides.append([line.rstrip("\r\n") for line in handle])
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"{other_path} has {len(sides[0])} lines but {english_path} has {len(sides[1])}; "
            "Tatoeba files must be line-aligned"
        )
    return sides[0], sides[1]


def tatoeba_languages(directory: str | Path) -> list[str]:
    """Languages with both files present in ``directory``."""
    directory = Path(directory)
    found = []
    for english in sorted(directory.glob("*-eng.eng")):
        language = english.name.split("-eng.")[0]
        if (directory / f"{language}-eng.{language}").is_file():
            found.append(language)
    return found


def evaluate_tatoeba(
    model: PSPModel,
    eval_dir: str | Path,
    missing: list[str],
    languages: list[str] | None = None,
    batch_size: int = 64,
) -> dict[str, TatoebaScore]:
    """Tatoeba error rates of ``model`` on ``eval_dir/tatoeba``.

    ``languages`` None evaluates every language present and reports the paper's languages
    (:data:`PAPER_TATOEBA_LANGUAGES`) that are absent as missing; an explicit list reports any
    of its languages that are absent.
    """
    directory = Path(eval_dir) / "tatoeba"
    present = tatoeba_languages(directory) if directory.is_dir() else []
    wanted = (
        languages if languages is not None else sorted(set(present) | set(PAPER_TATOEBA_LANGUAGES))
    )
    results = {}
    for language in wanted:
        if language not in present:
            log.warning(
                "Tatoeba %s: %s/%s-eng.* is missing; skipped", language, directory, language
            )
            missing.append(f"Tatoeba {language}")
            continue
        other, english = read_tatoeba(directory, language)
        results[language] = tatoeba_errors(
            model.embed(other, batch_size=batch_size, normalize=True),
            model.embed(english, batch_size=batch_size, normalize=True),
        )
    return results


def convert_laser_file(path: str | Path, eval_dir: str | Path) -> list[str]:
    """``tatoeba.xxx-eng.yyy`` -> ``eval_dir/tatoeba/xxx-eng.yyy``."""
    path = Path(path)
    if not _LASER_FILE.match(path.name):
        raise ValueError(f"{path}: expected a LASER file named tatoeba.xxx-eng.xxx or .eng")
    target = Path(eval_dir) / "tatoeba" / path.name.removeprefix("tatoeba.")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)
    return [str(target)]


_COLUMNS = (
    Column("language", "string"),
    Column("sentences", "int"),
    Column("error_xx_en", "float", "% retrieved wrong, xx -> en (cosine)"),
    Column("error_en_xx", "float", "% retrieved wrong, en -> xx (cosine)"),
    Column("error_mean", "float", "mean of both directions (cosine)"),
    Column("margin_error_mean", "float", "the same with margin scoring"),
    Column("paper", "float", "the paper's P-SP error %, mean"),
)
_BOARD = (
    Column("lang", "string"),
    *(c for c in _COLUMNS if c.name in ("language", "error_mean", "margin_error_mean", "paper")),
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@register
class Tatoeba(Suite):
    name = "tatoeba"
    title = "Tatoeba"
    files = ("tatoeba/*-eng.eng",)
    layout = "tatoeba/xxx-eng.xxx + tatoeba/xxx-eng.eng (aligned lines)"
    higher_is_better = False
    subset_option = "tatoeba_languages"
    subset_key = "tatoeba"
    subset_help = "comma-separated LASER codes (default: all present)"
    sources = {
        f"tatoeba.{lang}-eng.{side}": EvalSource(
            f"{LASER_TATOEBA}/tatoeba.{lang}-eng.{side}", "tatoeba"
        )
        for lang in TATOEBA_LANGUAGES
        for side in (lang, "eng")
    }
    paper = {"tatoeba": PAPER_TATOEBA}

    def subsets_for(self, lang: str) -> tuple[str, ...] | None:
        return (LASER_CODES[lang],) if lang in LASER_CODES else None

    def evaluate(self, model: PSPModel, run: SuiteRun) -> dict[str, TatoebaScore]:
        languages = None if run.subsets is None else list(run.subsets)
        return evaluate_tatoeba(model, run.eval_dir, run.missing, languages)

    def to_dict(self, result: Mapping[str, TatoebaScore], dev: DevDataset | None) -> dict:
        return {lang: score.as_dict() for lang, score in result.items()}

    def markdown(self, result: Mapping[str, TatoebaScore], dev: DevDataset | None) -> str:
        rows = [
            "| Tatoeba error % | n | xx->en | en->xx | mean | margin xx->en | margin en->xx "
            "| margin mean | paper (mean) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for lang, s in result.items():
            rows.append(
                f"| {lang} | {s.n} | {fmt(s.cosine_xx_en)} | {fmt(s.cosine_en_xx)} "
                f"| **{fmt(s.cosine_mean)}** | {fmt(s.margin_xx_en)} | {fmt(s.margin_en_xx)} "
                f"| **{fmt(s.margin_mean)}** | {fmt(PAPER_TATOEBA.get(lang))} |"
            )
        return "\n".join(rows)

    def scores(self, part: Mapping[str, Any], dev: DevDataset | None) -> list[Score]:
        return [
            Score(
                f"tatoeba_{lang}_error",
                f"Tatoeba {lang} error % (cosine)",
                round(values["cosine_mean"], 2),
                higher_is_better=False,
                paper=PAPER_TATOEBA.get(lang),
            )
            for lang, values in (part or {}).items()
            if values.get("cosine_mean") is not None
        ]

    def tables(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Table]:
        rows = [
            {
                "language": lang,
                "sentences": int(score["n"]),
                "error_xx_en": rounded(score["cosine_xx_en"]),
                "error_en_xx": rounded(score["cosine_en_xx"]),
                "error_mean": rounded(score["cosine_mean"]),
                "margin_error_mean": rounded(score["margin_mean"]),
                "paper": PAPER_TATOEBA.get(lang),
            }
            for lang, score in (part or {}).items()
        ]
        return {"tatoeba": Table(_COLUMNS, rows)} if rows else {}

    def board_cells(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Any]:
        return {
            "tatoeba_error": {
                k: {"cosine": v["cosine_mean"], "margin": v["margin_mean"]}
                for k, v in (part or {}).items()
            }
        }

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        cell = ", ".join(
            f"{code} {fmt(v['cosine'])}"
            + (f" ({PAPER_TATOEBA[code]:.1f})" if code in PAPER_TATOEBA else "")
            + f" / {fmt(v['margin'])}"
            for code, v in sorted(row["tatoeba_error"].items())
        )
        return [("Tatoeba error % cosine (paper) / margin", "---", cell or "-")]

    def compared(self, row: Mapping[str, Any]) -> list:
        return [
            (
                f"Tatoeba {code} error % (cosine)",
                lambda r, c=code: (r["tatoeba_error"].get(c) or {}).get("cosine"),
                False,
                False,
            )
            for code in sorted(row["tatoeba_error"])
        ]

    def board_columns(self) -> tuple[Column, ...]:
        return (Column("tatoeba_error", "float", "mean Tatoeba error % (cosine): see tatoeba"),)

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        errors = [v["cosine"] for v in row["tatoeba_error"].values()]
        return {"tatoeba_error": rounded(_mean(errors))}

    def board_details(self, rows: list[Mapping[str, Any]]) -> Table | None:
        details = [
            {
                "lang": row["lang"],
                "language": code,
                "error_mean": rounded(value["cosine"]),
                "margin_error_mean": rounded(value["margin"]),
                "paper": PAPER_TATOEBA.get(code),
            }
            for row in rows
            for code, value in sorted(row["tatoeba_error"].items())
        ]
        return Table(_BOARD, details) if details else None

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        return [
            w for path in downloads.get("tatoeba", []) for w in convert_laser_file(path, eval_dir)
        ]
