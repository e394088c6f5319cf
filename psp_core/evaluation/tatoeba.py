"""Tatoeba similarity search (LASER's test sets): error rate of nearest-neighbour retrieval.

For a language ``xxx`` the files ``tatoeba/xxx-eng.xxx`` and ``tatoeba/xxx-eng.eng`` are
line-aligned translations. Every ``xxx`` sentence retrieves its nearest English sentence
(``xx->en``) and every English sentence its nearest ``xxx`` sentence (``en->xx``); a retrieval
is an error when it is not the aligned line (by index, as LASER counts it). The paper's numbers
are taken as the mean of both directions, in %, by cosine (this project's reading of the
paper; the reference code has no Tatoeba evaluation to check the convention against), so both
directions are reported and their mean is the column beside the paper's. The ratio margin of
:mod:`psp_core.bitext_mining` (k = 4) is reported beside it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

#: The paper's Tatoeba languages (ISO 639-3, as in LASER's file names).
PAPER_TATOEBA_LANGUAGES = ("ara", "deu", "spa", "fra", "rus", "tur")
MARGIN_K = 4


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


def error_rate(retrieved: np.ndarray) -> float:
    """% of positions ``i`` whose retrieved index is not ``i``."""
    retrieved = np.asarray(retrieved)
    if len(retrieved) == 0:
        raise ValueError("no retrievals to score")
    return 100.0 * float(np.mean(retrieved != np.arange(len(retrieved))))


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
