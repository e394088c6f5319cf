"""``speed``: sentences per second of ``PSPModel.embed`` on the STS sentences under the
evaluation directory (:mod:`psp_core.evaluation.speed`), beside the paper's figure on one CPU
core; every language's model is timed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psp_core.evaluation.speed import SpeedResult, measure_speed, speed_sentences
from psp_core.evaluation.suite import Column, DevDataset, Score, Suite, SuiteRun, Table, register

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

#: Sentences/s on one CPU core.
PAPER_SPEED_CPU = 12_776
#: the speed record's fields, in the order shown: (field, what it is, unit)
SPEED_ROWS = (
    ("with_tokenization", "embed, tokenization included", "sentences/s"),
    ("without_tokenization", "embed pre-tokenized ids", "sentences/s"),
    ("sentences", "sentences embedded", "sentences"),
    ("batch_size", "batch size", "sentences"),
    ("torch_threads", "torch threads", "threads"),
    ("repeats", "repeats (the best is shown)", "runs"),
)
_COLUMNS = (Column("measure", "string"), Column("value", "float"), Column("unit", "string"))


@register
class Speed(Suite):
    name = "speed"
    title = "speed"
    files = ("sts/*/*.tsv", "sts17/*.tsv")
    layout = ""  # (the STS suites' files)
    paper = {"speed_cpu_1_core": PAPER_SPEED_CPU}

    def subsets_for(self, lang: str) -> tuple[str, ...]:
        return ()

    def empty(self) -> None:
        return None

    def evaluate(self, model: PSPModel, run: SuiteRun) -> SpeedResult | None:
        sentences = speed_sentences(run.eval_dir)
        if not sentences:
            log.warning("speed: no STS sentences under %s to time; skipped", run.eval_dir)
            run.missing.append("speed sentences (sts/, sts17/)")
            return None
        return measure_speed(model, sentences, repeats=run.options.get("speed_repeats", 3))

    def to_dict(self, result: SpeedResult | None, dev: DevDataset | None) -> dict | None:
        return result.as_dict() if result else None

    def markdown(self, result: SpeedResult, dev: DevDataset | None) -> str:
        return "\n".join(
            [
                f"| speed ({result.sentences} sentences, batch {result.batch_size}, "
                f"{result.torch_threads} torch threads) | sentences/s |",
                "|---|---:|",
                f"| with tokenization | {result.with_tokenization:,.0f} |",
                f"| without tokenization | {result.without_tokenization:,.0f} |",
                f"| paper, 1 CPU core | {PAPER_SPEED_CPU:,} |",
            ]
        )

    def scores(self, part: Mapping[str, Any] | None, dev: DevDataset | None) -> list[Score]:
        return []  # a machine's figure, not a model's: in no test score and no comparison

    def tables(self, part: Mapping[str, Any] | None, dev: DevDataset | None) -> dict:
        """The measurement with its units (best of the repeats, on this machine)."""
        if not part:
            return {}
        rows = [  # (whole numbers: a rate to a fraction of a sentence is noise, not a figure)
            {"measure": label, "value": float(round(part[key])), "unit": unit}
            for key, label, unit in SPEED_ROWS
            if part.get(key) is not None
        ]
        return {"speed": Table(_COLUMNS, rows)}

    def board_cells(self, part: Mapping[str, Any] | None, dev: DevDataset | None) -> dict:
        return {"sentences_per_s": (part or {}).get("with_tokenization")}

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        speed = row["sentences_per_s"]
        return [("sentences/s", "---:", "-" if speed is None else f"{speed:,.0f}")]

    def compared(self, row: Mapping[str, Any]) -> list:
        return []

    def board_columns(self) -> tuple[Column, ...]:
        return (Column("sentences_per_s", "int", "embedding speed, tokenization included"),)

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        speed = row["sentences_per_s"]
        return {"sentences_per_s": None if speed is None else int(speed)}
