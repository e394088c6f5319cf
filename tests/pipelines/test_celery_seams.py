"""The Celery executor (``pipelines/celery_executor.py``) runs dagster-celery's own execution loop
and task, through seams that are not its public API: the loop's ``step_execution_fn`` argument
and what it asks of the result it returns (``ready()``, ``get()``, ``revoke()``), ``_submit_task``,
``create_task(app, base=...)``. An upgrade of dagster-celery may change any of them without
notice; this test names the function that changed since 0.29.27, the release the executor was
written and tested against (``tests/pipelines/test_celery.py``), so that it is re-read first.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dagster_celery") is None,
    reason="dagster-celery is not installed (pip install -e '.[cluster]')",
)

WRITTEN_AGAINST = "0.29.27"

# module, qualified name -> sha256 of its source (first 16 hex digits), dagster-celery 0.29.27
SEAMS = {
    ("dagster_celery.core_execution_loop", "core_celery_execution_loop"): "3f780815d35a1987",
    ("dagster_celery.executor", "_submit_task"): "285fd51d484be52a",
    ("dagster_celery.tasks", "create_task"): "e3b5bcffe2de9901",
    ("dagster_celery.executor", "CeleryExecutor.__init__"): "fa8b4cf45c1d0af1",
    ("dagster_celery.executor", "CeleryExecutor.app_args"): "fb9907c191855661",
    ("dagster_celery.make_app", "make_app"): "15a172dd20ed6cd4",
}


def _source_digest(module: str, qualname: str) -> str:
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return hashlib.sha256(inspect.getsource(target).encode()).hexdigest()[:16]


def test_dagster_celery_is_the_release_the_executor_was_written_against():
    from dagster_celery.version import __version__

    assert __version__ == WRITTEN_AGAINST, (
        f"dagster-celery {__version__} is installed; pipelines/celery_executor.py and "
        f"pipelines/celery_step_monitor.py were written against {WRITTEN_AGAINST}: re-read the functions "
        "in SEAMS, rerun tests/pipelines/test_celery.py and scripts/cluster_e2e.py, then update "
        "this test"
    )


@pytest.mark.parametrize("module, qualname", sorted(SEAMS), ids=lambda v: str(v))
def test_each_seam_of_dagster_celery_is_unchanged(module, qualname):
    digest = _source_digest(module, qualname)
    assert digest == SEAMS[(module, qualname)], (
        f"{module}.{qualname} changed since dagster-celery {WRITTEN_AGAINST} (source sha256 "
        f"{digest}): pipelines/celery_executor.py depends on it; re-read it against "
        "pipelines/celery_step_monitor.py (what the loop asks of a step's result) before updating SEAMS"
    )
