"""The code location's sensors: ``new_bitext_sensor`` starts a language's run when new bitext
appears for it, and only then; ``dead_run_sensor`` marks failed the runs whose worker died.

The new bitext sensor watches two signals, per language:

* **a newer OPUS release** of one of its configured corpora (the API's newest version compared,
  ``v2018`` < ``v2024``, with the newest one already acted on, or with the configured version
  the first time). The run uses the new release through ``raw_pairs``' ``opus_versions``
  config; pin it in the registry to keep it for scheduled runs (corpora configured as
  ``latest`` follow new releases by themselves);
* **new files in its inbox** ``{storage root}/inbox/{lang}/`` (names, sizes and modification
  times, hashed).

The cursor (JSON) remembers what was acted on, so a change starts exactly one run. An OPUS API
that cannot be reached is logged and retried on the next tick; it never blocks the inbox check.

Runs fail their dead predecessors when they start and while they execute
(``pipelines.executor``, through ``pipelines.dead_runs``); under ``dagster dev`` or
``dagster-daemon`` the dead run sensor also does it every 30 seconds when no run is executing, so
a killed run shows as failed in the UI, stops counting against ``max_concurrent_runs`` and gives
back its pool slots without waiting for the next run. It never requests runs; it is on by
default.
"""

from __future__ import annotations

import json

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.settings.languages import LanguageSpec, load_registry
from assets.settings.profiles import retrain_profile_words, retrain_run_config
from assets.settings.resources import OpusResource, StorageResource, version_key
from ops.sources.opus import OpusError
from pipelines.dead_runs import fail_dead_runs
from pipelines.jobs import psp_language_job


def _newer_releases(
    spec: LanguageSpec, opus: OpusResource, seen: dict[str, str], context: SensorEvaluationContext
) -> dict[str, str]:
    """Corpus name -> newest version, for the corpora with a release newer than ``seen``."""
    newer = {}
    for corpus in spec.corpora:
        try:
            newest = opus.newest_version(corpus, spec.code)
        except OpusError as err:
            context.log.warning("%s: %s; will ask again next tick", spec.code, err)
            continue
        if newest is None:
            continue
        baseline = seen.get(corpus.name) or (None if corpus.version == "latest" else corpus.version)
        if baseline is None:
            seen[corpus.name] = newest  # first sight of a 'latest' corpus: the run resolves it
        elif version_key(newest) > version_key(baseline):
            newer[corpus.name] = newest
    return newer


@sensor(
    job=psp_language_job,
    minimum_interval_seconds=900,
    default_status=DefaultSensorStatus.STOPPED,
    description="Runs a language when OPUS publishes a newer release of one of its corpora or "
    f"files appear in its inbox, with {retrain_profile_words()}. Unchanged stages are reused.",
)
def new_bitext_sensor(
    context: SensorEvaluationContext, storage: StorageResource, opus: OpusResource
):
    cursor = json.loads(context.cursor) if context.cursor else {}
    seen_versions: dict[str, dict[str, str]] = cursor.get("opus", {})
    seen_inboxes: dict[str, str] = cursor.get("inbox", {})
    run_requests = []
    for lang, spec in load_registry().languages.items():
        seen = seen_versions.setdefault(lang, {})
        newer = _newer_releases(spec, opus, seen, context)
        inbox = storage.inbox_signature(lang)
        new_inbox = bool(inbox) and inbox != seen_inboxes.get(lang, "")
        if not newer and not new_inbox:
            continue
        # releases acted on before stay in use (an inbox run must not fall back to older ones)
        overrides = {
            corpus.name: seen[corpus.name]
            for corpus in spec.corpora
            if corpus.version != "latest" and corpus.name in seen
        } | newer
        reasons = [f"{name} {version}" for name, version in sorted(newer.items())]
        if new_inbox:
            reasons.append(f"inbox {inbox}")
        run_config = retrain_run_config()
        if overrides:
            run_config["ops"] = {"raw_pairs": {"config": {"opus_versions": overrides}}}
        run_requests.append(
            RunRequest(
                run_key=f"{lang}:{json.dumps(overrides, sort_keys=True)}:{inbox}",
                partition_key=lang,
                run_config=run_config,
                tags={
                    "psp/trigger": "new bitext: " + ", ".join(reasons),
                    "psp/language": lang,
                    "psp/profile": run_config["resources"]["profile"]["config"]["name"],
                },
            )
        )
        seen.update(newer)
        if new_inbox:
            seen_inboxes[lang] = inbox
    new_cursor = json.dumps({"opus": seen_versions, "inbox": seen_inboxes}, sort_keys=True)
    if not run_requests:
        return SensorResult(
            skip_reason=SkipReason("no new OPUS releases or inbox files"), cursor=new_cursor
        )
    return SensorResult(run_requests=run_requests, cursor=new_cursor)


DEAD_RUN_INTERVAL_SECONDS = 30


@sensor(
    name="dead_run_sensor",
    minimum_interval_seconds=DEAD_RUN_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Marks failed the runs whose worker process on this host is gone (kill -9, OOM) and "
        "frees their concurrency slots (the psp_training pool). Never starts a run."
    ),
)
def dead_run_sensor(context: SensorEvaluationContext) -> SkipReason:
    failed = fail_dead_runs(context.instance, context.log.warning)
    if failed:
        return SkipReason(f"marked {len(failed)} dead run(s) failed: {', '.join(failed)}")
    return SkipReason("no dead runs")
