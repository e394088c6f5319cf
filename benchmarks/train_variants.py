"""Training settings compared on the dev suite, epoch by epoch.

Trains a model on a training file that ``benchmarks/multi_model.py`` prepared (``--root``,
default ``runs/bench_multi``: ``multi`` or a language's ``training_data``) with the demo
profile's settings overridden by ``--set`` (JSON of ``TrainConfig`` fields), scores the dev
suite after every epoch (STS 2017 en-en, STS-B dev, retrieval on the held-back pairs of the
model's languages; psp_core/evaluation/dev_suite.py) and keeps the last epoch. Test sets are
not read: they are reported once, after a choice, by the pipeline's evaluation.

    .venv/bin/python benchmarks/train_variants.py --code multi --set '{"lr_decay": "linear"}'
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

from assets.settings.profiles import PROFILE_SETTINGS, Profile  # noqa: E402
from psp_core.evaluation.dev_suite import dev_mean  # noqa: E402
from psp_core.training.config import TrainConfig  # noqa: E402
from psp_core.training.trainer import train  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_multi")
    parser.add_argument("--code", default="multi", help="multi or a language of --root")
    parser.add_argument("--set", default="{}", help="TrainConfig fields over the demo's")
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        "a quick de training file built from the bitext (--root and --code unused), the smoke "
        "profile's settings under --set, the first 100 lines of the dev sets",
    )
    args = parser.parse_args()
    if args.quick:
        if _common.require_data(args.data_dir, "bitext", "en-de") is None:
            return 0
        args.root, args.code = _common.quick_root(args.data_dir, args.results_dir), "de"
    data = args.root / args.code / "training_data" / "train.h5"
    eval_dir = _common.eval_dir_for(args)
    if not eval_dir.is_dir() or not data.is_file():
        print(json.dumps({"skipped": f"{eval_dir} or {data} is absent"}))
        return 0
    overrides = json.loads(args.set)
    # the demo profile's own settings (assets/settings/profiles.py), as `make run` trains them
    asset = "multi_psp_model" if args.code == "multi" else "psp_model"
    demo = PROFILE_SETTINGS[Profile.demo][asset] | {"log_every": 500}
    smoke = PROFILE_SETTINGS[Profile.smoke][asset] if args.quick else {}
    config = TrainConfig(**{**demo, **smoke, **overrides})
    # spec: tokenized at inference as the training file was encoded (the registry's
    # pretokenizer: left to train(), a zh model would pick jieba over raw-text pieces)
    suite, spec = _common.dev_suite_for(args.root, args.code, eval_dir)
    epochs: list[dict] = []

    def score(model) -> float:
        scores = suite.scores(model, digits=None)
        epochs.append(
            {"dev_mean": round(dev_mean(scores, digits=None), 4)}
            | {name: round(value, 2) for name, value in scores.items()}
        )
        print(json.dumps(epochs[-1]), file=sys.stderr, flush=True)
        return len(epochs)  # rising: the last epoch is kept

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        train(
            data,
            args.root / args.code / "sentencepiece_model" / "sentencepiece.model",
            Path(work) / "model",
            config,
            dev_evaluator=score,
            resume=False,
            pretokenizer=spec.pretokenizer,
        )
    row = {
        "code": args.code,
        "set": overrides,
        "seconds": round(time.perf_counter() - started, 1),
        "epochs": epochs,
    }
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
