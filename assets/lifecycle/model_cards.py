"""The pipeline's side of model cards and exports: what the card says about the data (from the
upstream stages' manifests) and the run, the card rewritten into the bundle and every export,
and the exports ``psp_model`` writes when its config asks for them."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assets.framework.records import ModelRecord, RawPairsRecord, read_record
from assets.framework.stage import Manifest, Stage, StageInputMissing
from psp_core.models.bundle import read_config
from psp_core.models.model_card import CardFacts, model_card, retarget_card, write_card

#: the stages whose reports make the data funnel, in pipeline order
FUNNEL_STAGES = (
    "raw_pairs",
    "langid_filtered_pairs",
    "length_filtered_pairs",
    "deduplicated_pairs",
    "training_data",
)
EXPORTS_DIR = "exports"
EXPORT_RECORD = "psp_export.json"
log = logging.getLogger(__name__)


def _sources(raw: RawPairsRecord | None) -> list[dict[str, Any]]:
    sources = raw.source_counts() if raw is not None else []
    return [
        {"source": name, "lines_read": counts.n_in, "pairs_kept": counts.n_out}
        for name, counts in sources
    ]


def card_facts(
    stage: Stage, lang: str, model_record: ModelRecord, evaluation_markdown: str | None = None
) -> CardFacts:
    """What the card of ``lang``'s model says, from the manifests under ``stage``'s root."""
    found = {}
    for name in FUNNEL_STAGES:
        try:
            found[name] = stage.upstream(name)
        except StageInputMissing:
            continue  # a stage trained on data prepared elsewhere
    raw = read_record(found["raw_pairs"], RawPairsRecord) if "raw_pairs" in found else None
    window = model_record.training_window or [None, None]
    return CardFacts(
        name=f"psp-{lang}",
        sources=_sources(raw),
        # (the card's funnel takes the records as they are on disk: psp_core reads them)
        funnel=[(name, found[name].record) for name in found if "n_in" in found[name].record],
        training={
            "seconds": model_record.seconds,
            "started": window[0],
            "ended": window[1],
        },
        evaluation_markdown=evaluation_markdown,
    )


def export_dirs(model_manifest: Manifest) -> list[Path]:
    """The export folders written beside ``model_manifest``'s bundle."""
    root = model_manifest.output("bundle").parent / EXPORTS_DIR
    return sorted(path for path in root.iterdir() if path.is_dir()) if root.is_dir() else []


def refresh_model_card(model_manifest: Manifest, facts: CardFacts) -> None:
    """Rewrite the card of the bundle and of each of its exports (each naming its library)."""
    bundle = model_manifest.output("bundle")
    text = model_card(read_config(bundle), facts)
    write_card(bundle, text)
    for directory in export_dirs(model_manifest):
        record = directory / EXPORT_RECORD
        if record.is_file():
            library = json.loads(record.read_text())["format"]
            write_card(directory, retarget_card(text, library))


def _exported_fingerprint(directory: Path) -> str | None:
    try:
        return json.loads((directory / EXPORT_RECORD).read_text()).get("psp_fingerprint")
    except (OSError, ValueError, AttributeError):
        return None  # no export there, or a damaged one: export again


def write_exports(model_manifest: Manifest, formats: Sequence[str]) -> dict[str, Path]:
    """Each of ``formats`` exported under ``{model stage}/exports/{format}/``, unless an export
    of this very model (its stage fingerprint) is there already."""
    from psp_core.models.export import export_model

    bundle = model_manifest.output("bundle")
    written = {}
    for format in formats:
        target = bundle.parent / EXPORTS_DIR / format
        if _exported_fingerprint(target) != model_manifest.fingerprint:
            log.info("exporting %s as %s to %s", bundle, format, target)
            target.parent.mkdir(exist_ok=True)
            export_model(
                bundle, format, target, record={"psp_fingerprint": model_manifest.fingerprint}
            )
        written[format] = target
    return written
