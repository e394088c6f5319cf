"""``sts17``: the SemEval STS 2017 tracks (``sts17/PAIR.tsv``, columns in the order
:data:`~psp_core.evaluation.sts.STS17_TRACKS` gives), Pearson and Spearman x 100 each; a language's
model is evaluated on the tracks with a column in its language. Its ``en-en`` track is the
paper's dev set (the model selection's and the promotion gate's)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psp_core.evaluation.sts import STS17_TRACKS, Correlation, evaluate_sts17
from psp_core.evaluation.suite import (
    Column,
    DevDataset,
    EvalSource,
    Score,
    SuiteRun,
    Table,
    register,
)
from psp_core.evaluation.suites._correlations import CorrelationSuite, fmt, labelled, rounded

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

PAPER_STS17 = {"ar-ar": 76.2, "ar-en": 78.3, "es-es": 85.8, "es-en": 78.4, "tr-en": 79.2}
SEMEVAL17 = "http://alt.qcri.org/semeval2017/task1/data/uploads"
_BOARD = (
    Column("lang", "string"),
    Column("track", "string", "(dev): the model-selection file"),
    Column("pearson", "float", "Pearson x 100"),
    Column("paper", "float", "the paper's P-SP Pearson x 100"),
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@register
class Sts17(CorrelationSuite):
    name = "sts17"
    title = "STS 2017"
    files = ("sts17/*.tsv",)
    layout = "sts17/PAIR.tsv (gold<TAB>s1<TAB>s2)"
    subset_option = "sts17_tracks"
    subset_key = "sts17_tracks"
    subset_help = "comma-separated STS 2017 tracks (default: all present)"
    sources = {
        "sts2017.eval.v1.1.zip": EvalSource(f"{SEMEVAL17}/sts2017.eval.v1.1.zip", "sts17-input"),
        "sts2017.gs.zip": EvalSource(f"{SEMEVAL17}/sts2017.gs.zip", "sts17-gold"),
    }
    paper = {"sts17": PAPER_STS17}
    dev_files = {"sts17_en_en": "sts17/en-en.tsv"}

    def subsets_for(self, lang: str) -> tuple[str, ...] | None:
        if lang == "en":
            return ("en-en",)
        tracks = tuple(
            t.name for t in STS17_TRACKS if lang in (t.first_language, t.second_language)
        )
        return tracks or None

    def evaluate(self, model: PSPModel, run: SuiteRun) -> dict[str, Correlation]:
        tracks = None if run.subsets is None else list(run.subsets)
        return evaluate_sts17(model, run.eval_dir, run.missing, tracks)

    def markdown(self, result: Mapping[str, Correlation], dev: DevDataset | None) -> str:
        languages = {t.name: f"{t.first_language}, {t.second_language}" for t in STS17_TRACKS}
        rows = [
            "| STS 2017 | columns | n | Pearson | Spearman | paper (Pearson) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for name, c in result.items():
            rows.append(
                f"| {labelled(name, self.is_dev(name, dev))} | {languages.get(name, '')} "
                f"| {c.n} | {fmt(c.pearson)} | {fmt(c.spearman)} | {fmt(PAPER_STS17.get(name))} |"
            )
        return "\n".join(rows)

    def scores(self, part: Mapping[str, Any], dev: DevDataset | None) -> list[Score]:
        return [
            Score(
                f"sts17_{track}",
                f"STS 2017 {track} (Pearson)" + (" (dev)" if entry.get("dev") else ""),
                round(entry["pearson"], 2),
                paper=PAPER_STS17.get(track),
                dev=bool(entry.get("dev")),
            )
            for track, entry in (part or {}).items()
        ]

    def tables(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Table]:
        return {"sts17": self.correlations_table(part, PAPER_STS17)} if part else {}

    def board_cells(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Any]:
        return {
            "sts17_pearson": {k: v["pearson"] for k, v in (part or {}).items()},
            "sts17_dev": dev.name if dev and dev.suite == self.name else None,
        }

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        cell = ", ".join(
            f"{track} (dev) {fmt(value)}"
            if track == row["sts17_dev"]
            else f"{track} {fmt(value)} ({PAPER_STS17[track]:.1f})"
            if track in PAPER_STS17
            else f"{track} {fmt(value)}"
            for track, value in sorted(row["sts17_pearson"].items())
        )
        return [("STS 2017 Pearson (paper)", "---", cell or "-")]

    def compared(self, row: Mapping[str, Any]) -> list:
        return [
            (
                f"STS 2017 {track} (Pearson)" + (" (dev)" if track == row["sts17_dev"] else ""),
                lambda r, t=track: r["sts17_pearson"].get(t),
                True,
                False,
            )
            for track in sorted(row["sts17_pearson"])
        ]

    def board_columns(self) -> tuple[Column, ...]:
        return (Column("sts17_mean", "float", "mean over its STS 2017 tracks (not dev): sts17"),)

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        scored = [v for t, v in row["sts17_pearson"].items() if t != row["sts17_dev"]]
        return {"sts17_mean": rounded(_mean(scored))}

    def board_details(self, rows: list[Mapping[str, Any]]) -> Table | None:
        tracks = [
            {
                "lang": row["lang"],
                "track": f"{track} (dev)" if track == row["sts17_dev"] else track,
                "pearson": rounded(value),
                "paper": None if track == row["sts17_dev"] else PAPER_STS17.get(track),
            }
            for row in rows
            for track, value in sorted(row["sts17_pearson"].items())
        ]
        return Table(_BOARD, tracks) if tracks else None

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        from psp_core.evaluation import archives  # (zip and tar: imported when converting)

        inputs, golds = downloads.get("sts17-input", []), downloads.get("sts17-gold", [])
        if inputs and golds:
            return archives.convert_sts17(inputs[0], golds[0], eval_dir)
        archives.log.warning(
            "STS 2017 needs both the input and the gold archive; got only %s", sorted(downloads)
        )
        return []
