"""raw_pairs: a language's configured source (OPUS, ParaNMT or a local directory) plus anything
dropped into its inbox, as one pair file (English first)."""

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import (
    Backoff,
    Failure,
    Jitter,
    MetadataValue,
    RetryPolicy,
    RetryRequested,
    TableColumn,
    TableRecord,
    TableSchema,
)

from assets.framework.metadata import report_metadata
from assets.framework.records import RawPairsRecord, SourceCounts, read_record
from assets.framework.stage import Manifest, Stage
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import RawPairsConfig
from assets.settings.languages import LanguageSpec
from assets.settings.resources import OpusResource
from ops.pairs.pair_files import pair_file_info
from ops.sources.local_bitext import import_local_bitext
from ops.sources.pair_concat import concat_pair_files
from ops.sources.transient_errors import is_transient

CODE_VERSION = "1"
CHECK = "raw_pairs_not_empty"
PARANMT_SUFFIXES = (".txt", ".txt.gz", ".tsv", ".tsv.gz", ".zip")

RETRY_DELAY_ENV = "PSP_DOWNLOAD_RETRY_DELAY"


def _retry_delay() -> float:
    """Seconds before the stage's first retry: ``$PSP_DOWNLOAD_RETRY_DELAY``, default 30."""
    text = os.environ.get(RETRY_DELAY_ENV) or "30"
    try:
        delay = float(text)
    except ValueError:
        delay = -1.0
    if not delay >= 0:
        raise ValueError(f"${RETRY_DELAY_ENV} is {text!r}; expected seconds (a number >= 0)")
    return delay


#: Downloads fail for reasons that pass (a mirror's bad minute); psp_core.files.download already retries
#: each request, this retries the whole stage a few times with growing pauses (about 1, 3 and 7
#: times the delay). Only transient failures reach it: see :func:`fail_at_once_unless_transient`.
DOWNLOAD_RETRY_POLICY = RetryPolicy(
    max_retries=3, delay=_retry_delay(), backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS
)


@contextmanager
def fail_at_once_unless_transient() -> Iterator[None]:
    """Let network failures (:func:`ops.sources.transient_errors.is_transient`) reach the retry policy; turn
    every other error (a 404, a corpus or language missing, bad config, a corrupt zip) into a
    ``Failure`` that is not retried, with the error's message."""
    try:
        yield
    except (Failure, RetryRequested):
        raise
    except Exception as err:
        if is_transient(err):
            raise
        raise Failure(
            description=f"{err} (not retried: not a network failure)",
            allow_retries=False,
        ) from err


def directory_signature(directory: str | Path) -> str:
    """A hash of a directory's file names, sizes and modification times ('' if absent)."""
    directory = Path(directory)
    if not directory.is_dir():
        return ""
    listing = [
        (entry.name, entry.stat().st_size, entry.stat().st_mtime_ns)
        for entry in sorted(directory.iterdir())
        if entry.is_file() and not entry.name.startswith(".")
    ]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def resolved_corpora(spec: LanguageSpec, config: RawPairsConfig, opus: OpusResource) -> list:
    """The language's corpora with run-config version overrides and ``latest`` resolved to the
    newest release and the code that release spells the language with (a pinned release's code
    is found when its zip is fetched; both are in the stage's record)."""
    unknown = set(config.opus_versions) - {c.name for c in spec.corpora}
    if unknown:
        raise ValueError(
            f"opus_versions names {sorted(unknown)}, which are not corpora of {spec.code!r} "
            f"({[c.name for c in spec.corpora]})"
        )
    corpora = []
    for corpus in spec.corpora:
        version = config.opus_versions.get(corpus.name, corpus.version)
        release = opus.newest_release(corpus, spec.code) if version == "latest" else None
        if release:
            corpora.append(corpus.with_release(spec.code, *release))
        else:
            corpora.append(dataclasses.replace(corpus, version=version))
    return corpora


def _inbox_parts(spec: LanguageSpec, inbox: Path, files: list[Path], stage: Stage, paranmt):
    """Pair files made from the inbox: one for bitext, one per ParaNMT-format file."""
    if spec.kind == "bitext":
        output = stage.path("part-inbox.parquet")
        return [(output, import_local_bitext(inbox, lang=spec.code, output=output))]
    parts = []
    for index, path in enumerate(f for f in files if f.name.endswith(PARANMT_SUFFIXES)):
        output = stage.path(f"part-inbox-{index}.parquet")
        parts.append((output, paranmt.fetch(stage.storage.cache_dir(), output, source=path)))
    return parts


def plan(run: StageRun) -> Plan:
    """The sources: the registry's description, the OPUS releases read (run-config versions,
    ``latest`` resolved), the ParaNMT source, and signatures of the local directory and the
    inbox (a file added there makes a new fingerprint)."""
    spec, stage, storage = run.spec, run.stage, run.storage
    opus, paranmt = run.resource("opus"), run.resource("paranmt")
    # first, before any request or file: a ParaNMT language without a usable file stops here
    paranmt_source = paranmt.source() if spec.source == "paranmt" else None
    corpora = resolved_corpora(spec, run.config, opus) if spec.source == "opus" else []
    inbox = storage.inbox_dir(spec.code)
    sources = {
        **spec.describe_sources(),
        "corpora": [dataclasses.asdict(c) | {"codes": dict(c.codes or {})} for c in corpora],
        "paranmt": paranmt_source,
        "local_dir_signature": directory_signature(spec.local_dir) if spec.local_dir else None,
        "inbox_signature": storage.inbox_signature(spec.code),
    }

    def compute() -> tuple[dict, dict]:
        output = stage.path("part-source.parquet")
        if spec.source == "opus":
            fetched = opus.fetch_bitext(spec.code, corpora, storage.cache_dir(), output)
        elif spec.source == "paranmt":
            fetched = paranmt.fetch(storage.cache_dir(), output, paranmt_source)
        else:
            fetched = import_local_bitext(spec.local_dir, lang=spec.code, output=output)
        parts = [(output, fetched)]
        inbox_files = storage.inbox_files(spec.code)
        if inbox_files:
            run.context.log.info("inbox %s: %d files", inbox, len(inbox_files))
            parts.extend(_inbox_parts(spec, inbox, inbox_files, stage, paranmt))
        final = stage.path("pairs.parquet")
        if len(parts) == 1:
            os.replace(parts[0][0], final)
        else:
            concat_pair_files([path for path, _ in parts], final)
            for path, _ in parts:
                path.unlink()
        reports = [part.as_dict() for _, part in parts]
        record = RawPairsRecord(
            n_in=sum(r["n_in"] for r in reports),
            n_out=sum(r["n_out"] for r in reports),
            dropped=_sum_counts(reports, "dropped"),
            notes=_sum_counts(reports, "notes"),
            seconds=sum(r["seconds"] for r in reports),
            parts=reports,
            sources=sources,
        )
        return {"pairs": "pairs.parquet"}, record.as_dict()

    return Plan({"lang": spec.code, "sources": sources}, compute)


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The counts, the sources and each source's lines read and pairs kept; the check that the
    sources gave pairs."""
    record = read_record(manifest, RawPairsRecord)
    n_pairs = pair_file_info(manifest.output("pairs"))[0]
    metadata = report_metadata(manifest, record, "pairs")
    metadata["sources"] = sources_table(record.sources)
    metadata["per_source"] = per_source_table(record.source_counts())
    check = Check(
        CHECK,
        passed=n_pairs > 0,
        metadata={"pairs": n_pairs},
        description=None if n_pairs else "the sources gave no pairs: check the registry",
    )
    return Report(metadata, [check])


raw_pairs = stage_asset(
    name="raw_pairs",
    description="Download (cached) or import the language's bitext / paraphrases into one pair "
    "file.",
    code_version=CODE_VERSION,
    config=RawPairsConfig,
    kinds={"parquet"},
    resources=("opus", "paranmt"),
    checks=[
        CheckSpec(
            CHECK,
            "The download read at least one pair. Blocking: an empty corpus (a wrong corpus name "
            "or version, an empty inbox) would otherwise flow through every stage.",
        )
    ],
    # the download's progress (psp_core) and the reading's (ops) in the run's log
    loggers=("psp_core", "ops"),
    around=fail_at_once_unless_transient,
    retry_policy=DOWNLOAD_RETRY_POLICY,
    plan=plan,
    report=report,
)


def _sum_counts(reports: list[dict], key: str) -> dict[str, int]:
    """The reports' ``dropped`` (or ``notes``) counts added up, by reason."""
    total: dict[str, int] = {}
    for report in reports:
        for reason, count in report.get(key, {}).items():
            total[reason] = total.get(reason, 0) + count
    return total


SOURCES_COLUMNS = TableSchema(
    columns=[
        TableColumn("kind", "string", description="opus, paranmt, local or inbox"),
        TableColumn("name", "string", description="corpus, URL or directory"),
        TableColumn("version", "string", description="the OPUS release read"),
        TableColumn("cap", "string", description="at most this many pairs kept"),
    ]
)


def sources_table(sources: dict) -> MetadataValue:
    """Where the run read its pairs: each OPUS corpus (release, cap), ParaNMT, the local
    directory and the inbox."""
    rows = [
        {
            "kind": "opus",
            "name": corpus["name"],
            "version": corpus["version"],
            "cap": f"{corpus['cap']:,}" if corpus.get("cap") else "-",
        }
        for corpus in sources.get("corpora", [])
    ]
    if sources.get("paranmt"):
        rows.append({"kind": "paranmt", "name": sources["paranmt"], "version": "-", "cap": "-"})
    if sources.get("local_dir"):
        rows.append({"kind": "local", "name": sources["local_dir"], "version": "-", "cap": "-"})
    if sources.get("inbox_signature"):
        inbox = f"files signature {sources['inbox_signature'][:12]}"
        rows.append({"kind": "inbox", "name": inbox, "version": "-", "cap": "-"})
    return MetadataValue.table([TableRecord(row) for row in rows], schema=SOURCES_COLUMNS)


PER_SOURCE_COLUMNS = TableSchema(
    columns=[
        TableColumn("source", "string", description="corpus, local file or inbox file"),
        TableColumn(
            "release", "string", description="OPUS: the release read and its language pair"
        ),
        TableColumn("lines_read", "int"),
        TableColumn("pairs_kept", "int"),
        TableColumn("dropped", "string", description="reason: pairs"),
    ]
)


def per_source_table(sources: list[tuple[str, SourceCounts]]) -> MetadataValue:
    """One row per source (each OPUS corpus, each local or inbox file): the OPUS release and
    code read, lines read, pairs kept."""
    rows = []
    for name, counts in sources:
        drops = ", ".join(f"{k}: {v:,}" for k, v in counts.dropped.items()) or "-"
        release = f"{counts.version} en-{counts.opus_code}" if counts.opus_code else "-"
        row = {"source": name, "release": release, "lines_read": counts.n_in}
        rows.append(TableRecord(row | {"pairs_kept": counts.n_out, "dropped": drops}))
    return MetadataValue.table(rows, schema=PER_SOURCE_COLUMNS)
