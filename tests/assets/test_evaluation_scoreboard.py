"""model_evaluation and evaluation_scoreboard after a real psp_model trained with and without
model selection on STS 2017 en-en: the dev track is marked dev in results.json / results.md, the
metadata and the scoreboard, and the STS mean says what it covers beside the paper's 2012-2016.

The upstream sentencepiece model and training file are tests/conftest.py's toy ones, committed
as their stages' outputs (as in test_model_log); the evaluation data is generated in tmp_path.
"""

from __future__ import annotations

import json
import shutil

import pytest
from dagster import materialize

from assets.framework.stage import Stage, fingerprint
from assets.settings.profiles import ProfileResource
from assets.settings.resources import ComputeResource, EvaluationDataResource, StorageResource
from pipelines.definitions import defs

REGISTRY = '[languages.de]\nsource = "local"\nlocal_dir = "unused"\n'
TRAINING = dict(dim=32, epochs=2, batch_size=32, max_megabatch=4, anneal_every=0, lr=0.01)
#: de has no STS 2017 track of its own: evaluate en-en (the dev set) and es-en explicitly.
EVALUATION = {"suites": ["sts", "sts17"], "sts17_tracks": ["en-en", "es-en"], "speed_repeats": 1}
STS_FILES = ("sts/2012/MSRpar.tsv", "sts/2012/MSRvid.tsv", "sts/2013/FNWN.tsv")
STS17_FILES = ("sts17/en-en.tsv", "sts17/es-en.tsv")


@pytest.fixture()
def world(tmp_path, monkeypatch, spm_path, toy_training_file, toy) -> dict:
    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    root = tmp_path / "storage"
    storage = StorageResource(root=str(root))
    for name, output, source in (
        ("sentencepiece_model", "model", spm_path),
        ("training_data", "data", toy_training_file),
    ):
        stage = Stage(storage, "de", name)
        shutil.copy(source, stage.path(source.name))
        stage.commit(fingerprint(stage=name), {output: source.name}, {})
    eval_dir = tmp_path / "eval"
    pairs = toy.pairs(40, seed=31)
    for i, relative in enumerate(STS_FILES + STS17_FILES):
        aligned = [f"5.0\t{a}\t{b}" for a, b in pairs[:20]]
        mixed = [
            f"{(j + i) % 3}.0\t{a}\t{pairs[(j + i + 7) % 40][1]}"
            for j, (a, _) in enumerate(pairs[20:])
        ]
        path = eval_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(aligned + mixed) + "\n", encoding="utf-8")
    resources = {
        "storage": storage,
        "compute": ComputeResource(device="cpu", threads=1, workers=1),
        "eval_data": EvaluationDataResource(eval_dir=str(eval_dir)),
        "profile": ProfileResource(),
    }
    return {"root": root, "resources": resources}


def materialize_model_and_evaluation(world: dict, training: dict):
    """psp_model (``training``: its config) then model_evaluation, for de; the result."""
    run_config = {
        "ops": {
            "psp_model": {"config": training},
            "model_evaluation": {"config": EVALUATION},
        }
    }
    assets = [defs.get_assets_def(name) for name in ("psp_model", "model_evaluation")]
    result = materialize(
        assets, partition_key="de", resources=world["resources"], run_config=run_config
    )
    assert result.success
    return result


def metadata_of(result, name: str) -> dict:
    (event,) = result.asset_materializations_for_node(name)
    return {key: value.value for key, value in event.metadata.items()}


NOTE = (
    "over 2012-2013 (2014, 2015, 2016 absent; 2012 without OnWN, SMTeuroparl and SMTnews; "
    "2013 without OnWN, headlines and SMT)"
)


@pytest.mark.parametrize("dev_sts", ["sts17/en-en.tsv", None], ids=["selected", "no-selection"])
def test_the_dev_track_is_marked_everywhere_and_the_mean_says_what_it_covers(world, dev_sts):
    result = materialize_model_and_evaluation(world, {**TRAINING, "dev_sts": dev_sts})
    assert ("best_dev_score" in metadata_of(result, "psp_model")) == (dev_sts is not None)
    selected = dev_sts is not None

    directory = world["root"] / "de" / "model_evaluation"
    results = json.loads((directory / "results.json").read_text())
    assert results["dev_sts"] == dev_sts
    assert results["sts17"]["en-en"]["dev"] is selected
    assert results["sts17"]["es-en"]["dev"] is False
    assert results["sts"]["mean_note"] == NOTE
    markdown = (directory / "results.md").read_text()
    assert ("| en-en (dev) | en, en |" in markdown) is selected
    assert "STS 2012-2016 mean, over 2012-2013" in markdown

    metadata = metadata_of(result, "model_evaluation")
    assert metadata["dev_sts"] == (dev_sts or "none (no model selection)")
    assert ("sts17_en-en_dev_pearson" in metadata) is selected
    assert ("sts17_en-en_pearson" in metadata) is not selected
    assert metadata["sts_mean_over"] == NOTE
    assert ("| en-en (dev) |" in metadata["results"]) is selected
    tracks = {row.data["set"]: row.data for row in metadata["sts17"].records}
    assert ("en-en (dev)" in tracks) is selected and ("en-en" in tracks) is not selected
    assert tracks["es-en"]["paper"] == 78.4
    assert tracks["es-en"]["pearson"] == round(results["sts17"]["es-en"]["pearson"], 1)

    board = materialize(
        [defs.get_assets_def("evaluation_scoreboard")], resources=world["resources"]
    )
    assert board.success
    shown = metadata_of(board, "evaluation_scoreboard")
    (row,) = [record.data for record in shown["scoreboard"].records]
    assert row["lang"] == "de" and row["sts_years"] == "2012-2013"
    assert row["sts_mean"] == round(results["sts"]["mean"]["pearson"], 1)
    # the dev track is marked in sts17 and left out of the mean of the tracks
    tested = {
        k: v["pearson"] for k, v in results["sts17"].items() if not (selected and k == "en-en")
    }
    assert row["sts17_mean"] == round(sum(tested.values()) / len(tested), 1)
    tracks = {record.data["track"]: record.data for record in shown["sts17"].records}
    assert ("en-en (dev)" in tracks) is selected and ("en-en" in tracks) is not selected
    assert tracks["es-en"]["paper"] == 78.4
    assert tracks["en-en (dev)" if selected else "en-en"]["paper"] is None
    assert (
        "| paper STS 2012-2016 mean |"
        in (world["root"] / "_all" / "evaluation_scoreboard" / "scoreboard.md").read_text()
    )
    saved = json.loads(
        (world["root"] / "_all" / "evaluation_scoreboard" / "scoreboard.json").read_text()
    )
    (language,) = saved["languages"]
    assert language["sts17_dev"] == ("en-en" if selected else None)
    assert language["sts_mean_note"] == NOTE


def test_a_dev_file_other_than_en_en_reaches_the_evaluation(world):
    """psp_model records which file it selected on, so an overridden dev_sts is the row that
    is marked dev (the evaluation used to assume en-en)."""
    materialize_model_and_evaluation(world, {**TRAINING, "dev_sts": "sts17/es-en.tsv"})
    results = json.loads((world["root"] / "de" / "model_evaluation" / "results.json").read_text())
    assert results["dev_sts"] == "sts17/es-en.tsv"
    assert results["sts17"]["es-en"]["dev"] is True and results["sts17"]["en-en"]["dev"] is False
