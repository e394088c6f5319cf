import subprocess
import sys

import pytest

import psp_core
import psp_core.evaluation
import psp_core.training


@pytest.mark.parametrize("package", [psp_core, psp_core.training, psp_core.evaluation])
def test_every_public_name_resolves_and_is_listed(package) -> None:
    assert sorted(package.__all__) == sorted(package._EXPORTS)
    for name in package.__all__:
        value = getattr(package, name)
        assert getattr(value, "__name__", name) == name  # (constants have no name)
        assert name in dir(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # noqa: B018


def test_the_preparation_workers_modules_do_not_import_torch() -> None:
    # worker processes of language ID, segmentation and encoding import these; torch would
    # cost each of them ~1.5 s and ~250 MB
    code = (
        "import sys, ops.language_id.langid, ops.training_data.encoding, ops.cleaning.segmentation, psp_core.tokenization.tokenizer; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.slow
def test_the_code_location_loads_without_torch_or_pandas() -> None:
    # every `dagster job execute`, `dagster dev` code server, multiprocess step and Celery task
    # loads it: torch (~1.5-3 s) and pandas (~0.4 s) are imported by the steps that use them
    code = (
        "import sys, pipelines.definitions as d; d.defs.resolve_job_def('psp_language_job'); "
        "d.defs.resolve_job_def('psp_multi_job'); "
        "print(sorted({'torch', 'pandas'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
