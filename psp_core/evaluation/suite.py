"""What an evaluation suite is, and the registry of suites every consumer iterates.

A suite is one :class:`Suite` subclass in one module, registered with :func:`register`: its name,
the files it reads under an evaluation directory, where they are downloaded from and how they
are converted, which of its subsets apply to a language, how it scores a model, how its result
reads (JSON, markdown, tables), its headline scores (each with its direction), and its dev
scores (what the promotion gate compares). The runner (``evaluate_model``), the results, the
``psp evaluate`` command, the per-language plan, the Dagster assets, the scoreboard and the gate
read the registry (:mod:`psp_core.evaluation.registry`); none names a suite. docs/development.md ("Adding an evaluation suite") shows
a whole one.

A suite that defines only :attr:`~Suite.name`, :attr:`~Suite.title`, :attr:`~Suite.files`,
:meth:`~Suite.evaluate` and :meth:`~Suite.scores` is evaluated, shown in every table from its
scores, compared on the scoreboard and, with :attr:`~Suite.dev_files`, gated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel


@dataclass(frozen=True)
class DevDataset:
    """The dataset a dev file names: ``suite`` is the suite's name (``sts`` with ``year``,
    ``sts17``, ``stsb``), ``name`` the dataset's (see ``registry.dev_dataset``)."""

    suite: str
    name: str
    year: str | None = None


@dataclass(frozen=True)
class EvalSource:
    """One file to download: its URL, its format (which suite converts it, and how), and
    optionally its sha256."""

    url: str
    format: str
    sha256: str | None = None


@dataclass(frozen=True)
class Score:
    """One figure of a suite's result: ``key`` names it in the model registry's test scores
    (``sts17_es-en``), ``label`` in tables (``STS 2017 es-en (Pearson)``); ``headline`` figures
    (one per suite, e.g. a mean) come first where sets are compared, the rest (one per subset)
    after them; ``dev`` marks the model-selection set's figure, which is in no mean and no
    test score."""

    key: str
    label: str
    value: float | None
    higher_is_better: bool = True
    paper: float | None = None
    headline: bool = False
    dev: bool = False


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "string", "int" or "float"
    description: str = ""


@dataclass(frozen=True)
class Table:
    """Rows of one table (each a ``{column name: value}``), shown inline by the Dagster UI."""

    columns: tuple[Column, ...]
    rows: list[dict[str, Any]]


SCORE_COLUMNS = (
    Column("set", "string", "(dev): the model-selection set, in no mean"),
    Column("score", "float"),
    Column("higher_is_better", "string"),
    Column("paper", "float", "the paper's P-SP figure"),
)


@dataclass
class SuiteRun:
    """What a suite's :meth:`Suite.evaluate` gets besides the model: the evaluation directory,
    the list to name absent datasets in, the subsets asked for (None: the suite's default),
    the dev set (the STS file the model was selected on) and the runner's options."""

    eval_dir: Path
    missing: list[str]
    subsets: Sequence[str] | None = None
    dev: DevDataset | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


class Suite(ABC):
    """An evaluation suite; subclass it, set the class attributes, define :meth:`evaluate`,
    override what differs."""

    #: the key of its result everywhere (``results.json``, ``--suites``, the Dagster config)
    name: ClassVar[str]
    #: how tables and help texts name it (``STS 2017``)
    title: ClassVar[str]
    #: the files it reads, glob patterns under the evaluation directory; a suite none of whose
    #: files is there has nothing to evaluate
    files: ClassVar[tuple[str, ...]] = ()
    #: its files as a person reads them, in error messages (``sts17/PAIR.tsv (gold<TAB>s1<TAB>s2)``;
    #: default: :attr:`files`; empty: it reads other suites' files)
    layout: ClassVar[str | None] = None
    #: whether its figures are better higher (a correlation) or lower (an error rate)
    higher_is_better: ClassVar[bool] = True
    #: its subsets' keyword in ``evaluate_model`` and ``psp evaluate`` (``--sts17-tracks``),
    #: and their key in the evaluation stage's fingerprint; None: it has no subsets to choose
    subset_option: ClassVar[str | None] = None
    subset_key: ClassVar[str | None] = None
    subset_help: ClassVar[str] = ""
    #: file name -> download (``psp fetch-eval-data``), each with a format :meth:`convert` reads
    sources: ClassVar[Mapping[str, EvalSource]] = {}
    #: the paper's figures, in ``results.json``'s ``paper`` block
    paper: ClassVar[Mapping[str, Any]] = {}
    #: dev score name -> file under the evaluation directory (development data: the promotion
    #: gate and the model selection score a version on it, with :meth:`dev_scorer`)
    dev_files: ClassVar[Mapping[str, str]] = {}
    #: with :attr:`dev_files`, a method ``dev_scorer(path)``: a scorer of a model on one of them
    #: (the file read once, the scorer called each epoch); :func:`register` refuses a suite
    #: with dev files and no scorer
    dev_scorer: Callable[[Path], Callable[[PSPModel], float]]

    # -- what runs ---------------------------------------------------------------------------

    def subsets_for(self, lang: str) -> tuple[str, ...] | None:
        """The subsets that apply to the model of language ``lang`` (``()``: the suite as a
        whole); None: the suite does not apply to it."""
        return None

    @abstractmethod
    def evaluate(self, model: PSPModel, run: SuiteRun) -> Any:
        """The suite's result for ``model`` (empty when nothing was found to evaluate)."""

    def empty(self) -> Any:
        """The result of a suite that did not run."""
        return {}

    def dev_dataset(self, parts: tuple[str, ...]) -> DevDataset | None:
        """The dataset of this suite a dev file names (its path's parts, relative to the
        evaluation directory), or None."""
        return None

    def evaluated(self, result: Any, dev: DevDataset) -> bool:
        """Whether ``result`` holds the dev set's row."""
        return False

    # -- how its result reads ----------------------------------------------------------------

    def to_dict(self, result: Any, dev: DevDataset | None) -> Any:
        """The JSON of ``result`` (``results.json[name]``)."""
        return result

    def scores(self, part: Any, dev: DevDataset | None) -> list[Score]:
        """Its figures, from its part of ``results.json`` (``part``; None where it did not run)
        and the dev set (the model-selection file's dataset, if any)."""
        return []

    def markdown(self, result: Any, dev: DevDataset | None) -> str | None:
        """Its part of the markdown report; by default a table of :meth:`scores`."""
        scores = self.scores(self.to_dict(result, dev), dev)
        if not scores:
            return None
        rows = [f"| {self.title} | score | paper |", "|---|---:|---:|"]
        rows += [f"| {s.label} | {_cell(s.value)} | {_cell(s.paper)} |" for s in scores]
        return "\n".join(rows)

    def tables(self, part: Any, dev: DevDataset | None) -> dict[str, Table]:
        """Its tables on the evaluation's materialization; by default one of :meth:`scores`."""
        scores = self.scores(part, dev)
        if not scores:
            return {}
        rows = [
            {
                "set": f"{s.label} (dev)" if s.dev else s.label,
                "score": s.value,
                "higher_is_better": "yes" if s.higher_is_better else "no",
                "paper": s.paper,
            }
            for s in scores
        ]
        return {self.name: Table(SCORE_COLUMNS, rows)}

    # -- the scoreboard across languages ------------------------------------------------------

    def board_cells(self, part: Any, dev: DevDataset | None) -> dict[str, Any]:
        """Its fields of a language's scoreboard row (``scoreboard_rows``; JSON-ready)."""
        return {f"{self.name}_scores": [asdict(s) for s in self.scores(part, dev)]}

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        """Its columns of the markdown scoreboard: ``(header, alignment, cell)``."""
        scores = row.get(f"{self.name}_scores") or []
        cell = ", ".join(f"{s['label']} {_cell(s['value'])}" for s in scores)
        return [(self.title, "---", cell or "-")]

    def compared(self, row: Mapping[str, Any]) -> list[tuple[str, Callable, bool, bool]]:
        """The sets the multilingual model is compared on: ``(label, value of a scoreboard
        row, higher is better, headline)``."""
        return [
            (
                score["label"],
                lambda r, key=score["key"]: next(
                    (s["value"] for s in r.get(f"{self.name}_scores") or [] if s["key"] == key),
                    None,
                ),
                score["higher_is_better"],
                score["headline"],
            )
            for score in row.get(f"{self.name}_scores") or []
        ]

    def board_columns(self) -> tuple[Column, ...]:
        """Its columns of the scoreboard's short table (one row per language)."""
        return (Column(self.name, "float", f"{self.title}: its headline figure"),)

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Its values of one language's row of the short table."""
        scores = row.get(f"{self.name}_scores") or []
        headline = next((s for s in scores if s["headline"]), scores[0] if scores else None)
        return {self.name: None if headline is None else headline["value"]}

    def board_details(self, rows: list[Mapping[str, Any]]) -> Table | None:
        """Its table of every figure of every language (None: nothing to show)."""
        details = [
            {"lang": row["lang"], "set": s["label"], "score": s["value"], "paper": s["paper"]}
            for row in rows
            for s in row.get(f"{self.name}_scores") or []
        ]
        columns = (Column("lang", "string"), SCORE_COLUMNS[0], SCORE_COLUMNS[1], SCORE_COLUMNS[3])
        return Table(columns, details) if details else None

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        """Turn downloaded files (format -> paths) into its files under ``eval_dir``; returns
        the datasets written."""
        return []


_REGISTRY: dict[str, Suite] = {}


def register(suite: type[Suite] | Suite) -> type[Suite] | Suite:
    """Add a suite to the registry (a class decorator, or called with an instance); the last
    one registered under a name replaces the earlier one."""
    instance = suite() if isinstance(suite, type) else suite
    if instance.dev_files and not callable(getattr(instance, "dev_scorer", None)):
        raise TypeError(f"suite {instance.name!r} has dev_files but no dev_scorer method")
    _REGISTRY[instance.name] = instance
    return suite


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def registry_so_far() -> dict[str, Suite]:
    """The suites registered until now (``psp_core.evaluation.registry.registered`` adds the
    built-in ones first)."""
    return dict(_REGISTRY)
