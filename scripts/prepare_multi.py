"""The first half of ``make run PARTITION=multi``: every ``[multi]`` language's pairs, up to
``deduplicated_pairs``, one Dagster run per language (``prepare_pairs_job``) recorded in the
instance like any run. A language whose stages are up to date is reused (the stages'
fingerprints), so this is cheap when the languages were built before; a failing
language stops here with its run's error. Then the Makefile runs ``psp_multi_job``.

Usage (the environment as ``make run`` sets it: DAGSTER_HOME, PSP_LANGUAGES, PSP_PROFILE)::

    python scripts/prepare_multi.py [--languages de,fr]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--languages", help="comma-separated codes (default: the registry's [multi] languages)"
    )
    args = parser.parse_args(argv)

    from dagster import DagsterInstance

    from assets.settings.languages import load_registry
    from pipelines.definitions import defs

    registry = load_registry()
    codes = args.languages.split(",") if args.languages else registry.multi_languages()
    job = defs.resolve_job_def("prepare_pairs_job")
    with DagsterInstance.get() as instance:
        for index, code in enumerate(codes, 1):
            started = time.perf_counter()
            print(f"[{index}/{len(codes)}] {code}: preparing its pairs", flush=True)
            result = job.execute_in_process(
                partition_key=code, instance=instance, raise_on_error=False
            )
            if not result.success:
                failures = [
                    event.message
                    for event in result.all_events
                    if event.is_failure and event.message
                ]
                print(
                    f"{code}: preparing its pairs failed (run {result.run_id}):\n"
                    + "\n".join(failures[-3:]),
                    file=sys.stderr,
                )
                return 1
            print(f"[{index}/{len(codes)}] {code}: ready in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
