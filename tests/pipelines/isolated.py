"""Materialize raw_pairs in a fresh interpreter, for what is decided when the code location is
imported: the partitions (from the registry ``PSP_LANGUAGES`` names) and the retry policy
(``PSP_DOWNLOAD_RETRY_DELAY``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.ops.opus_server import OpusServer

ROOT = Path(__file__).resolve().parents[2]

#: Imports the Definitions, materializes raw_pairs for each partition given, prints JSON.
SCRIPT = """
import json, sys, time
from dagster import DagsterEventType, materialize
from pipelines.definitions import defs
from assets.settings.resources import OpusResource, ParaNmtResource, StorageResource

api, root, *partitions = sys.argv[1:]
raw_pairs = defs.get_assets_def("raw_pairs")
answer = {"partitions": raw_pairs.partitions_def.get_partition_keys(), "runs": {}}
for partition in partitions:
    start = time.monotonic()
    result = materialize(
        [raw_pairs],
        partition_key=partition,
        raise_on_error=False,
        resources={
            "storage": StorageResource(root=root),
            "opus": OpusResource(api_base=api, retries=1, backoff=0.01, timeout=10),
            "paranmt": ParaNmtResource(url=api + "missing.zip", retries=1, backoff=0.01),
        },
    )
    answer["runs"][partition] = {
        "success": result.success,
        "seconds": time.monotonic() - start,
        "events": [e.event_type_value for e in result.all_events],
        "failures": [
            e.step_failure_data.error.message
            for e in result.all_events
            if e.event_type == DagsterEventType.STEP_FAILURE
        ],
    }
print(json.dumps(answer))
"""


def materialize_raw_pairs_isolated(
    server: OpusServer, root: Path, *partitions: str, **env: str
) -> dict:
    """Run :data:`SCRIPT` with ``env`` added to the environment; return its JSON answer:
    ``partitions`` (raw_pairs' partition keys) and, per partition, ``success``, ``seconds``,
    ``events`` (event type names) and ``failures`` (step failure messages)."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, server.api_url, str(root), *partitions],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    answer["stderr"] = done.stderr
    answer["seconds"] = time.monotonic() - start
    return answer
