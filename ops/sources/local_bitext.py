"""Bitext from a local directory of line-aligned files ``NAME.en`` + ``NAME.<lang>``.

Each ``NAME`` contributes one file pair (plain or ``.gz``, e.g. ``combined.en.gz`` +
``combined.de.gz``); several NAMEs are concatenated in sorted order. Other files in the
directory (``combined.origin.gz``, READMEs) are ignored. Lines are read as bytes in lockstep and
cleaned like OPUS lines (see :func:`ops.sources.moses_zip.aligned_batches`): pairs with an empty or
undecodable side are counted skips, unequal line counts are an error.
"""

from __future__ import annotations

import gzip
import logging
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from ops.pairs.pair_files import PairWriter
from ops.sources.moses_zip import aligned_batches
from ops.stage_report import StageReport

log = logging.getLogger(__name__)


def _open_bytes(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb", buffering=1 << 20)


def find_bitext_files(directory: str | Path, lang: str) -> list[tuple[Path, Path]]:
    """``(english_file, other_file)`` for every NAME in ``directory``, sorted by NAME.

    Raises:
        FileNotFoundError: the directory is missing, holds no pair, or a NAME has one side only.
        ValueError: a side exists both plain and gzipped.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"bitext directory {directory} does not exist")
    sides: dict[str, dict[str, Path]] = defaultdict(dict)
    for path in sorted(directory.iterdir()):
        base = path.name[:-3] if path.name.endswith(".gz") else path.name
        stem, _, suffix = base.rpartition(".")
        if not stem or suffix not in ("en", lang) or not path.is_file():
            continue
        if suffix in sides[stem]:
            raise ValueError(
                f"{directory}: both {sides[stem][suffix].name} and {path.name} exist; keep one"
            )
        sides[stem][suffix] = path
    if not sides:
        raise FileNotFoundError(
            f"{directory} holds no bitext: expected files NAME.en and NAME.{lang} (plain or .gz)"
        )
    pairs = []
    for stem in sorted(sides):
        found = sides[stem]
        for needed in ("en", lang):
            if needed not in found:
                present = next(iter(found.values()))
                raise FileNotFoundError(
                    f"{present} has no partner: expected {directory / f'{stem}.{needed}'} "
                    f"(or .gz) with the same number of lines"
                )
        pairs.append((found["en"], found[lang]))
    return pairs


def import_local_bitext(directory: str | Path, *, lang: str, output: str | Path) -> StageReport:
    """Write the en-``lang`` bitext in ``directory`` to a pair file (``src`` = English).

    Raises:
        FileNotFoundError / ValueError: see :func:`find_bitext_files`; ValueError also when
            a file pair is not line-aligned (naming both files and the line).
    """
    if lang == "en":
        raise ValueError("import_local_bitext reads en-X bitext; lang must not be 'en'")
    files = find_bitext_files(directory, lang)
    report = StageReport("local_bitext")
    with PairWriter(output, src_lang="en", tgt_lang=lang, background=True) as writer:
        for english_path, other_path in files:
            log.info("importing %s + %s", english_path, other_path)
            with ExitStack() as stack:
                english = stack.enter_context(_open_bytes(english_path))
                other = stack.enter_context(_open_bytes(other_path))
                batches = aligned_batches(
                    english, other, report, left_name=str(english_path), right_name=str(other_path)
                )
                for src, tgt in batches:
                    writer.write(src, tgt)
        report.n_out = writer.n_pairs
    return report.finish()
