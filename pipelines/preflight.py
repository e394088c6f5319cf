"""``make run``'s checks before Dagster starts a run: the knobs PARTITION, PROFILE, CONFIG and
REGISTRY, each mistake one line naming the knob and the fix, exit 2.

    python -m pipelines.preflight --partition de --profile demo --registry FILE [--config FILE]

REGISTRY is read as the code location will read it; PARTITION must be one of its languages (or
``multi``, with a ``[multi]`` model to build); PROFILE one of the profiles (an empty one is an
error: it used to mean the paper's settings, silently); CONFIG a YAML file whose run config
Dagster accepts for the job the partition runs, its first error given by its path
(``ops:psp_model:config:bogus_knob``), not as a traceback. Prints nothing when all is well.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

MULTI = "multi"


class KnobError(Exception):
    """A ``make run`` knob that cannot run: the one line to print."""


def check_registry(registry: str) -> Any:
    from assets.settings.languages import RegistryError, parse_registry

    path = Path(registry)
    if not registry:
        raise KnobError("REGISTRY is empty: name a language registry file (default "
                        "configs/languages-shared-data.toml; the shipped one is "
                        "assets/languages.toml)")  # fmt: skip
    if not path.is_file():
        raise KnobError(f"REGISTRY={registry}: no such file (the offline registry is "
                        "configs/languages-shared-data.toml, the shipped one "
                        "assets/languages.toml)")  # fmt: skip
    try:
        return parse_registry(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError) as error:
        raise KnobError(f"REGISTRY={registry}: cannot be read ({error})") from None
    except RegistryError as error:
        first = str(error).splitlines()[0]
        raise KnobError(f"REGISTRY={registry}: {first}") from None


def check_partition(partition: str, registry: Any, path: str) -> str:
    """The job the partition runs."""
    if partition == MULTI:
        if not registry.multi_languages():
            raise KnobError(f"PARTITION=multi: REGISTRY={path} has no usable language for "
                            "the multilingual model")  # fmt: skip
        return "psp_multi_job"
    if partition not in registry.codes:
        raise KnobError(
            f"PARTITION={partition or '(empty)'} is not a language of REGISTRY={path}: "
            f"choose one of {', '.join(registry.codes)}, or multi"
        )
    if partition in registry.errors:
        raise KnobError(f"PARTITION={partition}: {registry.errors[partition]}")
    return "psp_language_job"


def check_profile(profile: str) -> None:
    from assets.settings.profiles import Profile

    names = ", ".join(p.value for p in Profile)
    if not profile.strip():
        raise KnobError(f"PROFILE is empty: choose one of {names} (make run's default: demo)")
    if profile.strip() not in {p.value for p in Profile}:
        raise KnobError(f"PROFILE={profile} is not a profile: choose one of {names}")


def check_config(config: str, job_name: str) -> None:
    if not config:
        return
    import yaml

    path = Path(config)
    if not path.is_file():
        raise KnobError(f"CONFIG={config}: no such file (a run config YAML file, like "
                        "configs/smoke.yaml)")  # fmt: skip
    try:
        run_config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as error:
        raise KnobError(f"CONFIG={config}: cannot be read ({error})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise KnobError(f"CONFIG={config}:{where}: not valid YAML ({problem})") from None
    if not isinstance(run_config, dict):
        raise KnobError(f"CONFIG={config}: expected a mapping of ops:, resources:, execution:")
    from dagster import DagsterInvalidConfigError, validate_run_config

    from pipelines.definitions import defs

    try:
        validate_run_config(defs.resolve_job_def(job_name), run_config)
    except DagsterInvalidConfigError as error:
        raise KnobError(f"CONFIG={config}: {config_error_line(error.errors[0].message)}") from None


_UNEXPECTED = re.compile(
    r'Received unexpected config entry "(?P<entry>[^"]+)" at (?P<where>.+?)\. Expected: "(?P<expected>.*)"',
    re.S,
)


def config_error_line(message: str) -> str:
    """Dagster's config error as one line: the path of the entry and, for an unknown one, the
    names that would be accepted there."""
    found = _UNEXPECTED.match(message)
    if found:
        where = found["where"].removeprefix("path ").removeprefix("root:")
        path = "" if where == "the root" else f"{where}:"
        accepted = ", ".join(_top_level_keys(found["expected"]))
        return f"{path}{found['entry']} is not a setting here (accepted: {accepted})"
    line = message.split(". Expected", 1)[0].replace("root:", "")
    line = re.sub(r' of type "<class \'\w+\'>"', "", line)
    return " ".join(line.split())


def _top_level_keys(schema: str) -> list[str]:
    """The keys at the outer level of Dagster's ``{ a?: T b: { ... } }`` description."""
    outer, depth = [], 0
    for char in schema:
        depth += char in "{[("
        if depth == 1 and char not in "{[(":
            outer.append(char)
        depth -= char in "}])"
    return list(dict.fromkeys(re.findall(r"(\w+)\??:", "".join(outer))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__.splitlines()[0])
    for knob in ("partition", "profile", "config", "registry"):
        parser.add_argument(f"--{knob}", default="")
    args = parser.parse_args(argv)
    try:
        registry = check_registry(args.registry)
        job_name = check_partition(args.partition, registry, args.registry)
        check_profile(args.profile)
        check_config(args.config, job_name)
    except KnobError as error:
        print(f"make run: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
