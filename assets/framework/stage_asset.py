"""One way to declare a stage's asset: its work and its settings, the Dagster plumbing here.

A stage module gives :func:`stage_asset` two functions:

- ``plan(run) -> Plan``: what decides the output (the fingerprint's inputs, beyond the stage's
  directory name and code version, which are added here) and how to compute it (``compute()
  -> (outputs, record)``, as :meth:`assets.framework.stage.Stage.run` takes it);
- ``report(run, plan, manifest) -> Report``: the metadata and the check outcomes of the
  finished (or reused) stage.

The asset built here reads the run config into the stage's config class and the language
(by default the registry's entry of the run's partition), runs the plan through
:meth:`Stage.run` (reused when the fingerprint matches) with the stage's loggers' lines in the
run's log, and returns the report as a ``MaterializeResult`` whose data version is the
fingerprint. The asset's name, key, group, owners, code version, deps, kinds, checks, config
schema and description are those given: the UI shows them, as it did before the factory.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetsDefinition,
    DataVersion,
    MaterializeResult,
    PartitionsDefinition,
    asset,
)

from assets.framework.catalog import DATA_GROUP, OWNERS
from assets.framework.log_bridge import logs_to_dagster
from assets.framework.stage import Manifest, Stage, fingerprint
from assets.settings.config import StageConfig, op_config, plain_schema
from assets.settings.languages import LanguageSpec, load_registry
from assets.settings.partitions import language_partitions
from assets.settings.resources import StorageResource


@dataclass(frozen=True)
class CheckSpec:
    """An asset check the stage reports on (blocking ones stop the run's downstream steps)."""

    name: str
    description: str
    blocking: bool = True


@dataclass(frozen=True)
class Check:
    """One check's outcome, of severity error (``warn``: a warning)."""

    name: str
    passed: bool
    metadata: Mapping[str, Any] = field(default_factory=dict)
    description: str | None = None
    warn: bool = False


@dataclass(frozen=True)
class Report:
    """What the UI shows of a materialization: its metadata and its checks' outcomes."""

    metadata: Mapping[str, Any]
    checks: Sequence[Check] = ()


@dataclass(frozen=True)
class Plan:
    """What decides a stage's output and how to compute it.

    ``key``: the fingerprint's inputs besides ``stage`` (the stage's directory name) and
    ``code`` (its code version), which a key may set to keep an older fingerprint's values.
    ``shows``: what the plan decided that the report shows (a rule, thresholds).
    """

    key: Mapping[str, Any]
    compute: Callable[[], tuple[dict[str, str], dict[str, Any]]]
    shows: Mapping[str, Any] = field(default_factory=dict)


class StageInputs:
    """The finished upstream stages a stage declared (``stage_asset``'s ``inputs`` and
    ``also_reads``), each an attribute named after the stage (its directory): ``run.inputs.
    sentencepiece_model``, read once per run. A name the stage did not declare is an error
    naming those it did, so the declaration is the one place a stage's inputs are listed.

    Reading one raises :class:`~assets.framework.stage.StageInputMissing` when it has no complete
    output.
    """

    def __init__(self, stage: Stage, declared: Collection[str]) -> None:
        self._stage, self._declared = stage, frozenset(declared)
        self._read: dict[str, Manifest] = {}

    def __getattr__(self, name: str) -> Manifest:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._declared:
            raise AttributeError(
                f"stage {self._stage.name} declares no input {name!r} (it declares "
                f"{sorted(self._declared) or 'none'}: stage_asset's inputs or also_reads)"
            )
        if name not in self._read:
            self._read[name] = self._stage.upstream(name)
        return self._read[name]


@dataclass(frozen=True)
class StageRun:
    """One materialization of a stage as its plan and report see it."""

    context: AssetExecutionContext
    spec: LanguageSpec
    config: Any
    stage: Stage
    declared_inputs: Collection[str] = ()
    inputs: StageInputs = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", StageInputs(self.stage, self.declared_inputs))

    @property
    def storage(self) -> StorageResource:
        return self.stage.storage

    def resource(self, key: str) -> Any:
        """The run's resource ``key`` (one the asset declared in ``resources``)."""
        return getattr(self.context.resources, key)


def partition_language(context: AssetExecutionContext) -> LanguageSpec:
    """The registry's entry of the run's language partition."""
    return load_registry()[context.partition_key]


def stage_asset(
    *,
    name: str,
    description: str,
    code_version: str,
    config: type[StageConfig],
    kinds: Collection[str],
    plan: Callable[[StageRun], Plan],
    report: Callable[[StageRun, Plan, Manifest], Report],
    inputs: Sequence[str] = (),
    input_assets: Mapping[str, str | AssetDep] | None = None,
    also_reads: Sequence[str] = (),
    reads_across_partitions: Sequence[AssetDep] = (),
    checks: Sequence[CheckSpec] = (),
    resources: Collection[str] = (),
    stage: str | None = None,
    spec: Callable[[AssetExecutionContext], LanguageSpec] = partition_language,
    partitions_def: PartitionsDefinition | None = language_partitions,
    group: str = DATA_GROUP,
    loggers: Sequence[str] = ("ops",),
    around: Callable[[], AbstractContextManager] = nullcontext,
    **asset_options: Any,
) -> AssetsDefinition:
    """The asset ``name``: the stage ``stage`` (its directory, default ``name``) of the language
    ``spec(context)``, computed by ``plan`` and shown by ``report``.

    ``inputs`` are the upstream stages it reads (their directory names: ``run.inputs.<name>``
    in the plan and report), given to Dagster as its dependencies: the asset of the same name,
    or ``input_assets[name]`` (the multilingual chain's ``multi_*`` assets, a partition
    mapping); ``also_reads`` the stages further upstream its report reads too (already upstream
    through its inputs: not dependencies of their own); ``reads_across_partitions`` the
    dependencies whose partitions the plan reads itself (every language's, for the
    multilingual model's pairs).

    ``resources`` are the resource keys the plan and report read (:meth:`StageRun.resource`)
    besides ``storage``, which every stage has;
    ``loggers`` the Python loggers whose lines go to the run's log while the stage computes;
    ``around`` a context the materialization runs in, past reading the run config (one that
    turns some errors into others); ``asset_options`` go to ``@asset`` as they are (a retry
    policy, a pool).
    """
    directory = stage or name

    def materialize_stage(context: AssetExecutionContext) -> MaterializeResult:
        settings = op_config(context, config)
        with around():
            return _materialize(context, settings)

    def _materialize(context: AssetExecutionContext, settings: Any) -> MaterializeResult:
        language = spec(context)
        stage_of_run = Stage(context.resources.storage, language.code, directory)
        run = StageRun(context, language, settings, stage_of_run, (*inputs, *also_reads))
        planned = plan(run)
        key = fingerprint(**({"stage": directory, "code": code_version} | dict(planned.key)))
        with ExitStack() as logging_to_dagster:  # the stage's progress lines
            for logger in loggers:
                logging_to_dagster.enter_context(logs_to_dagster(context.log, logger))
            manifest = run.stage.run(key, planned.compute, force=bool(run.config.force))
        shown = report(run, planned, manifest)
        return MaterializeResult(
            metadata=dict(shown.metadata),
            data_version=DataVersion(manifest.fingerprint),
            check_results=[_check_result(check) for check in shown.checks] or None,
        )

    materialize_stage.__name__ = name
    materialize_stage.__doc__ = description
    return asset(
        name=name,
        config_schema=plain_schema(config),
        partitions_def=partitions_def,
        group_name=group,
        owners=OWNERS,
        code_version=code_version,
        deps=[*((input_assets or {}).get(role, role) for role in inputs), *reads_across_partitions]
        or None,
        kinds=set(kinds),
        check_specs=[
            AssetCheckSpec(c.name, asset=name, blocking=c.blocking, description=c.description)
            for c in checks
        ]
        or None,
        required_resource_keys={"storage", *resources},
        **asset_options,
    )(materialize_stage)


def _check_result(check: Check) -> AssetCheckResult:
    return AssetCheckResult(
        check_name=check.name,
        passed=check.passed,
        severity=AssetCheckSeverity.WARN if check.warn else AssetCheckSeverity.ERROR,
        metadata=dict(check.metadata),
        description=check.description,
    )
