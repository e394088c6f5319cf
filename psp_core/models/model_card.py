"""The model card: a ``README.md`` beside every bundle (and in its exports), in Hugging Face's
model-card conventions: YAML front matter (language, license, library, tags), then what the
model is, how to load it, what it was trained on, how, and how it scores.

``psp_core.train`` writes a card from what the bundle knows (its settings, the training's
history); the Dagster pipeline rewrites it with the data funnel per source and filter, and again
after the evaluation with its tables. An export copies the card, naming its own library.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psp_core.files.output_files import write_text_if_changed
from psp_core.models.bundle_config import BundleConfig

CARD_FILE = "README.md"
#: the code that loads the bundle, per library a card can name
USAGE = {
    "psp_core": (
        "from psp_core import load_model\n\n"
        'model = load_model("{path}")\n'
        'vectors = model.embed(["A man is playing a guitar.", "Someone plays the guitar."])'
    ),
    "sentence-transformers": (
        "from sentence_transformers import SentenceTransformer\n\n"
        'model = SentenceTransformer("{path}")\n'
        'vectors = model.encode(["A man is playing a guitar.", "Someone plays the guitar."])'
    ),
    "model2vec": (
        "from model2vec import StaticModel\n\n"
        'model = StaticModel.from_pretrained("{path}")\n'
        'vectors = model.encode(["A man is playing a guitar.", "Someone plays the guitar."])'
    ),
}
TAGS = ["sentence-similarity", "feature-extraction", "static-embeddings", "paraphrastic", "p-sp"]
CITATION = """@inproceedings{wieting-etal-2022-paraphrastic,
    title = "Paraphrastic Representations at Scale",
    author = "Wieting, John and Gimpel, Kevin and Neubig, Graham and Berg-Kirkpatrick, Taylor",
    booktitle = "Proceedings of EMNLP 2022: System Demonstrations",
    year = "2022",
}"""


@dataclass
class CardFacts:
    """What a card says beyond the bundle's own config; every part is optional.

    ``sources``: one row per data source, ``{"source", "lines_read", "pairs_kept"}``;
    ``funnel``: ``(stage, report)`` in pipeline order, each report with ``n_in``, ``n_out``,
    ``dropped`` (reason -> pairs); ``training``: seconds, device, started/ended (Unix time);
    ``evaluation_markdown``: the evaluation's tables (``EvaluationResults.to_markdown``).
    """

    name: str = "psp model"
    sources: Sequence[Mapping[str, Any]] = ()
    funnel: Sequence[tuple[str, Mapping[str, Any]]] = ()
    training: Mapping[str, Any] = field(default_factory=dict)
    evaluation_markdown: str | None = None
    license_notes: Sequence[str] = ()


def _front_matter(config: BundleConfig, library: str) -> str:
    # JSON strings are valid YAML scalars: names with any character stay safe
    lines = ["---", "language:"]
    lines += [f"- {json.dumps(code)}" for code in config.languages or ["en"]]
    # the weights keep their training data's licenses (OPUS lists each corpus's): named and
    # linked to the card's license notes, as the Hub asks of "other"
    lines += ["license: other", "license_name: training-data-licenses", "license_link: README.md"]
    lines += [f"library_name: {library}", "pipeline_tag: sentence-similarity"]
    tags = (["sentence-transformers"] if library == "sentence-transformers" else []) + TAGS
    lines += ["tags:"] + [f"- {tag}" for tag in tags] + ["---"]
    return "\n".join(lines)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.4g}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(timestamp)))


def _training_section(config: BundleConfig, facts: CardFacts) -> list[str]:
    summary = config.training or {}
    settings = summary.get("config") if isinstance(summary.get("config"), Mapping) else {}
    parts = ["## Training"]
    shown = ("epochs", "batch_size", "max_megabatch", "anneal_every", "margin", "lr")
    shown += ("optimizer", "dropout", "grad_clip", "seed")
    rows = [(name, settings[name]) for name in shown if name in settings]
    if settings.get("matryoshka_dims"):
        dims = ", ".join(str(d) for d in settings["matryoshka_dims"])
        rows.append(("matryoshka_dims", f"{dims} (truncate with embed(dim=...))"))
    data = summary.get("data") if isinstance(summary.get("data"), Mapping) else {}
    if isinstance(data.get("n_pairs"), int):
        rows.insert(0, ("training pairs", int(data["n_pairs"])))
    if summary.get("negatives_from"):
        rows.append(("hard negatives from", summary["negatives_from"]))
    for key in ("steps", "epochs_completed", "best_epoch"):
        if summary.get(key) is not None:
            rows.append((key.replace("_", " "), summary[key]))
    run = facts.training
    if run.get("seconds") is not None:
        rows.append(("training time", f"{float(run['seconds']) / 60:.1f} min"))
    device = run.get("device") or summary.get("device")
    if device:
        rows.append(("device", device))
    if run.get("started"):
        rows.append(("trained", f"{_when(run['started'])} to {_when(run.get('ended'))}"))
    parts.append(_table(["setting", "value"], rows))
    history = summary.get("history") if isinstance(summary.get("history"), list) else []
    if history:
        parts.append(
            _table(
                ["epoch", "steps", "mean loss", "pairs/s", "dev score (higher is better)"],
                [_epoch_row(h) for h in history if isinstance(h, Mapping)],
            )
        )
        if any(isinstance(h, Mapping) and h.get("dev_score") is not None for h in history):
            parts.append(DEV_SCORE_NOTE)
    return parts


DEV_SCORE_NOTE = (
    "The dev score is the model selection's: Pearson x 100 on the dev STS file (STS 2017 en-en "
    "by default), or the dev suite's mean (STS 2017 en-en, STS-B dev, 100 minus the held-back "
    "retrieval error); the epoch with the best one is kept."
)
SCALES_NOTE = (
    "Correlations are Pearson and Spearman x 100 (higher is better); Tatoeba figures are error "
    "rates in % (lower is better); speeds are sentences per second on the machine and threads "
    "named in their table, the paper's on one CPU core. A row marked (dev) is development data, "
    "in no mean."
)


def _epoch_row(record: Mapping[str, Any]) -> tuple:
    """One epoch of the history; what a record lacks (an older or hand-made bundle) is "-"."""

    def value(key: str, digits: int | None) -> Any:
        item = record.get(key)
        if isinstance(item, bool) or not isinstance(item, int | float):
            return "-"
        return round(float(item), digits) if digits is not None else round(item)

    epoch = record.get("epoch")
    return (
        epoch + 1 if isinstance(epoch, int) else "-",
        value("steps", None),
        value("loss", 4),
        value("pairs_per_second", None),
        value("dev_score", 2),
    )


def model_card(
    config: BundleConfig, facts: CardFacts | None = None, *, library: str = "psp_core"
) -> str:
    """The card's text for a bundle with ``config``, loaded by ``library``."""
    facts = facts or CardFacts()
    languages = ", ".join(config.languages) or "en"
    tokenizer = "sentencepiece unigram" + (", lowercased" if config.lowercase else "")
    if config.pretokenizer != "none":
        tokenizer += f", {config.pretokenizer} word segmentation first"
    parts = [
        _front_matter(config, library),
        f"# {facts.name}",
        "Paraphrastic sentence embeddings (P-SP, Wieting et al., *Paraphrastic Representations "
        "at Scale*, 2022): a sentence's vector is the mean of the embeddings of its "
        "sentencepiece pieces, trained with a margin loss on paraphrase or translation pairs "
        f"and hard negatives mined from mega-batches. Languages: {languages}. Compare vectors "
        "by cosine similarity.",
        "## Usage",
        "```python\n" + USAGE[library].format(path=".") + "\n```",
        "## Model",
        _table(
            ["property", "value"],
            [
                ("dimension", config.dim),
                ("vocabulary", config.vocab_size),
                ("tokenizer", tokenizer),
                ("max pieces per sentence", config.max_length or "no limit"),
            ],
        ),
    ]
    if facts.sources or facts.funnel:
        parts.append("## Training data")
    if facts.sources:
        parts.append(
            _table(
                ["source", "lines read", "pairs kept"],
                [(s["source"], s["lines_read"], s["pairs_kept"]) for s in facts.sources],
            )
        )
    if facts.funnel:
        rows = []
        for stage, report in facts.funnel:
            dropped = report.get("dropped") or {}
            reasons = ", ".join(f"{k}: {v:,}" for k, v in sorted(dropped.items())) or "-"
            rows.append((stage, int(report["n_in"]), int(report["n_out"]), reasons))
        parts.append(_table(["stage", "pairs in", "pairs out", "dropped"], rows))
    parts += _training_section(config, facts)
    if facts.evaluation_markdown:
        parts += ["## Evaluation", SCALES_NOTE, facts.evaluation_markdown.strip()]
    notes = list(facts.license_notes) or [
        "The weights are derived from the training data above; each source keeps its own "
        "license (OPUS lists every corpus's), so check them before redistributing the model."
    ]
    parts += ["## License notes", "\n".join(f"- {note}" for note in notes)]
    parts += ["## Citation", "```bibtex\n" + CITATION + "\n```"]
    return "\n\n".join(parts) + "\n"


def write_card(directory: str | Path, text: str) -> Path:
    """Write ``text`` as ``directory/README.md``, atomically (temporary name, then rename);
    the same text again leaves the file untouched (a re-run that reused every stage rewrites
    nothing)."""
    path = Path(directory) / CARD_FILE
    write_text_if_changed(path, text)
    return path


def retarget_card(text: str, library: str) -> str:
    """A card written for one library, for another: ``library_name`` and the usage snippet
    (and the sentence-transformers tag) follow the target."""
    head, separator, body = text.partition("\n---\n")
    lines = [
        f"library_name: {library}" if line.startswith("library_name:") else line
        for line in head.splitlines()
        if line != "- sentence-transformers"
    ]
    if library == "sentence-transformers":
        lines.insert(lines.index("tags:") + 1, "- sentence-transformers")
    for code in USAGE.values():
        body = body.replace(code.format(path="."), USAGE[library].format(path="."))
    return "\n".join(lines) + separator + body
