"""Convert the official STS archives into an evaluation directory (docs/evaluation.md).

Formats handled (the file names are those inside the official archives):

* SemEval STS 2012-2016 (``STS20XX-en-test.zip``): ``STS.input.NAME.txt``
  (``sentence1<TAB>sentence2[<TAB>...]``) with ``STS.gs.NAME.txt`` (one gold score per line);
  2016 names them ``STS2016.input.NAME.txt`` / ``STS2016.gs.NAME.txt``. Pairs with an empty gold
  line (unscored in 2015/2016) are skipped and counted. 2012's ``surprise.OnWN`` and
  ``surprise.SMTnews`` become ``OnWN`` and ``SMTnews``. Output: ``sts/YEAR/NAME.tsv``.
* SemEval STS 2017 (``sts2017.eval.v1.1.zip`` + ``sts2017.gs.zip``): ``STS.input.trackN.L1-L2.txt``
  with ``STS.gs.trackN.L1-L2.txt``; the track ids map to file names through
  :data:`psp_core.evaluation.sts.STS17_TRACKS`. Columns are kept in the archive's order.
  Output: ``sts17/PAIR.tsv``.
* STS Benchmark (``Stsbenchmark.tar.gz``): ``stsbenchmark/sts-{train,dev,test}.csv``, tab
  separated ``genre, file, year, id, score, sentence1, sentence2[, ...]``. Output:
  ``stsb/SPLIT.tsv``.

Every output is ``gold<TAB>s1<TAB>s2``, written under a temporary name and renamed; an output
that already exists is left alone. Each suite converts its own downloads
(:meth:`psp_core.evaluation.suite.Suite.convert`) with these.
"""

from __future__ import annotations

import logging
import os
import re
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from psp_core.evaluation.sts import STS17_TRACKS

log = logging.getLogger(__name__)

_STS_INPUT = re.compile(r"(?:^|/)STS(?P<year>\d{4})?\.input\.(?P<name>.+)\.txt$")
_STSB_MEMBER = re.compile(r"(?:^|/)sts-(?P<split>train|dev|test)\.csv$")


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%s is not valid UTF-8; read as cp1252", where)
        return data.decode("cp1252", errors="replace")


def _lines(data: bytes, where: str) -> list[str]:
    """Lines without their ``\\n`` / ``\\r\\n`` (only ``\\n`` separates lines)."""
    lines = _decode(data, where).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def sts_rows(input_lines: list[str], gold_lines: list[str], where: str) -> list[str]:
    """``gold<TAB>s1<TAB>s2`` rows from an input file and its gold file (unscored pairs skipped)."""
    if len(gold_lines) != len(input_lines):
        raise ValueError(
            f"{where}: {len(input_lines)} sentence pairs but {len(gold_lines)} gold lines"
        )
    rows, unscored = [], 0
    for number, (pair, gold) in enumerate(zip(input_lines, gold_lines, strict=True), 1):
        fields = pair.split("\t")
        if len(fields) < 2:
            raise ValueError(f"{where}:{number}: expected sentence1<TAB>sentence2, got {pair!r}")
        if not gold.strip():
            unscored += 1
            continue
        score = gold.split("\t")[0].strip()
        try:
            float(score)
        except ValueError as error:
            raise ValueError(f"{where}: gold line {number} {gold!r} is not a number") from error
        rows.append(f"{score}\t{fields[0].strip()}\t{fields[1].strip()}\n")
    if unscored:
        log.info("%s: skipped %d pairs without a gold score", where, unscored)
    return rows


def _convert_sts_members(
    members: Mapping[str, Callable[[], bytes]],
    label: str,
    target_of: Callable[[str], Path | None],
) -> list[str]:
    """Convert every input/gold member pair; ``target_of(dataset name)`` gives the output."""
    written = []
    for member in sorted(members):
        match = _STS_INPUT.search(member)
        if not match:
            continue
        target = target_of(match["name"])
        if target is None:
            log.info("%s: %s is not a dataset we evaluate; ignored", label, member)
            continue
        gold = member[: match.start()] + member[match.start() :].replace(".input.", ".gs.", 1)
        if gold not in members:
            log.warning("%s: %s has no gold file %s; skipped", label, member, gold)
            continue
        if not target.exists():
            where = f"{label}:{member}"
            rows = sts_rows(_lines(members[member](), where), _lines(members[gold](), gold), where)
            _write_atomic(target, "".join(rows))
        written.append(str(target))
    return written


def _zip_members(bundle: zipfile.ZipFile, basename_only: bool = False):
    return {
        (Path(name).name if basename_only else name): (lambda name=name: bundle.read(name))
        for name in bundle.namelist()
        if not name.endswith("/")
    }


def convert_sts_year(archive: str | Path, year: str, eval_dir: str | Path) -> list[str]:
    """SemEval STS ``year`` English test archive -> ``eval_dir/sts/YEAR/NAME.tsv``."""
    root = Path(eval_dir) / "sts" / year
    with zipfile.ZipFile(archive) as bundle:
        return _convert_sts_members(
            _zip_members(bundle),
            str(archive),
            lambda name: root / f"{name.removeprefix('surprise.')}.tsv",
        )


def convert_sts17(
    input_archive: str | Path, gold_archive: str | Path, eval_dir: str | Path
) -> list[str]:
    """STS 2017 input and gold archives -> ``eval_dir/sts17/PAIR.tsv``."""
    names = {track.track: track.name for track in STS17_TRACKS}
    root = Path(eval_dir) / "sts17"
    with zipfile.ZipFile(input_archive) as inputs, zipfile.ZipFile(gold_archive) as golds:
        members = {**_zip_members(inputs, True), **_zip_members(golds, True)}
        return _convert_sts_members(
            members,
            f"{input_archive} + {gold_archive}",
            lambda name: root / f"{names[name]}.tsv" if name in names else None,
        )


def convert_stsb(archive: str | Path, eval_dir: str | Path) -> list[str]:
    """``Stsbenchmark.tar.gz`` -> ``eval_dir/stsb/{train,dev,test}.tsv``."""
    written = []
    with tarfile.open(archive, "r:*") as bundle:
        for member in bundle.getmembers():
            match = _STSB_MEMBER.search(member.name)
            if not match or not member.isfile():
                continue
            target = Path(eval_dir) / "stsb" / f"{match['split']}.tsv"
            where = f"{archive}:{member.name}"
            if not target.exists():
                rows = []
                for number, line in enumerate(_lines(bundle.extractfile(member).read(), where), 1):
                    if not line.strip():
                        continue
                    fields = line.split("\t")
                    if len(fields) < 7:
                        raise ValueError(
                            f"{where}:{number}: expected at least 7 tab-separated fields"
                        )
                    float(fields[4])
                    rows.append(f"{fields[4]}\t{fields[5].strip()}\t{fields[6].strip()}\n")
                _write_atomic(target, "".join(rows))
            written.append(str(target))
    return written
