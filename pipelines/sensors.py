"""new_bitext_sensor: start a language's run when new bitext appears for it, and only then.

Two signals, per language:

* **a newer OPUS release** of one of its configured corpora (the API's newest version compared,
  ``v2018`` < ``v2024``, with the newest one already acted on, or with the configured version
  the first time). The run uses the new release through ``raw_pairs``' ``opus_versions``
  config; pin it in the registry to keep it for scheduled runs (corpora configured as
  ``latest`` follow new releases by themselves);
* **new files in its inbox** ``{storage root}/inbox/{lang}/`` (names, sizes and modification
  times, hashed).

The cursor (JSON) remembers what was acted on, so a change starts exactly one run. An OPUS API
that cannot be reached is logged and retried on the next tick; it never blocks the inbox check.
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

from assets.languages import LanguageSpec, load_registry
from assets.profiles import retrain_run_config
from assets.resources import OpusResource, StorageResource, version_key
from ops.opus import OpusError
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
    "files appear in its inbox.",
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
