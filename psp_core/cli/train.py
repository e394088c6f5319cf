"""``psp train``: a model bundle from a training HDF5, with checkpoints and exact resume; every
hyperparameter of :class:`~psp_core.training.TrainConfig` is a flag."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import MISSING, fields
from pathlib import Path

from psp_core.cli.arguments import finite_float, positive_int
from psp_core.cli.errors import CliError, require_file
from psp_core.extras import require
from psp_core.files.output_files import check_outputs_apart
from psp_core.models.bundle import check_bundle_output
from psp_core.models.hub import model_folder
from psp_core.tokenization.tokenizer import PRETOKENIZERS
from psp_core.training.config import TrainConfig


def add_train_parser(commands) -> None:
    parser = commands.add_parser("train", help="train a model on a training HDF5")
    _add_train_arguments(parser)
    parser.set_defaults(handler=cmd_train)


def cmd_train(args: argparse.Namespace) -> None:
    # torch, h5py and requests (--dev-sts) come with the [train] extra: one line naming it,
    # before any check or work
    for module in ("torch", "h5py", "requests"):
        require(module, "train", "psp train")
    from psp_core.training.checkpoint import CheckpointDamagedError, check_checkpoint_directory
    from psp_core.training.trainer import default_checkpoint_dir

    require_file(Path(args.data), "training file")
    require_file(Path(args.spm), "sentencepiece model")
    if args.dev_sts:
        require_file(Path(args.dev_sts), "dev STS file")
    if args.init_from:  # (a Hub model: fetched, or found in the cache)
        args.init_from = str(model_folder(args.init_from))
    if args.init_from and not Path(args.init_from).is_dir():
        raise CliError(f"--init-from {args.init_from} is not a model bundle directory")
    if args.max_length < 0:
        raise CliError(f"--max-length must be 0 (no limit) or positive, got {args.max_length}")
    inputs = (args.data, args.spm, args.dev_sts, args.init_from)
    if args.checkpoint_dir:
        check_outputs_apart(args.output, "--output", args.checkpoint_dir, "--checkpoint-dir")
    output = check_bundle_output(
        args.output, overwrite=args.overwrite, inputs=inputs, what="output bundle directory"
    )
    checkpoint_dir = Path(args.checkpoint_dir or default_checkpoint_dir(output))
    check_checkpoint_directory(checkpoint_dir, overwrite=args.overwrite, inputs=(*inputs, output))
    config = TrainConfig(**{name: getattr(args, name) for name in _train_config_fields()})
    evaluator = None
    if args.dev_sts:
        from psp_core.evaluation import StsEvaluator

        evaluator = StsEvaluator(Path(args.dev_sts))
    try:
        result = _train(args, config, evaluator)
    except CheckpointDamagedError as error:
        restart = shlex.join(["psp", *getattr(args, "argv", ["train", "..."]), "--no-resume"])
        raise CheckpointDamagedError(error.detail, restart) from None
    if result.rank == 0:  # under torchrun, only rank 0 reports
        print(json.dumps({"bundle": str(result.bundle), "history": result.state.history}, indent=2))


def _train(args: argparse.Namespace, config: TrainConfig, evaluator):
    from psp_core.training import train

    return train(
        args.data,
        args.spm,
        args.output,
        config,
        dev_evaluator=evaluator,
        checkpoint_dir=args.checkpoint_dir,
        resume=not args.no_resume,
        keep_checkpoint=args.keep_checkpoint,
        pretokenizer=args.pretokenizer,
        lowercase=not args.no_lowercase,
        max_length=args.max_length,
        overwrite=args.overwrite,
        init_from=args.init_from,
    )


def _int_tuple(text: str) -> tuple[int, ...]:
    """``512,256,64`` -> ``(512, 256, 64)``."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        message = f"expected integers separated by commas, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


_TYPES = {
    "int": int,
    "float": finite_float,
    "str": str,
    "int | None": int,
    "str | None": str,
    "tuple[int, ...] | None": _int_tuple,
}


def _train_config_fields():
    return [f.name for f in fields(TrainConfig)]


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="training HDF5")
    parser.add_argument(
        "--spm", required=True, help="sentencepiece model the data was encoded with"
    )
    parser.add_argument(
        "--output",
        required=True,
        help="model bundle directory to write (an earlier bundle there is replaced; a folder of "
        "other files is refused unless --overwrite)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output (and use --checkpoint-dir) even if it is a folder of other files",
    )
    parser.add_argument("--dev-sts", help="STS file (gold<TAB>s1<TAB>s2) for model selection")
    parser.add_argument("--checkpoint-dir", help="default: <output>.checkpoint")
    parser.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    parser.add_argument(
        "--init-from",
        metavar="MODEL",
        help="start from this model bundle's weights (a folder or hf://ORG/NAME[@REVISION]; a "
        "fresh optimizer: bundles keep none) "
        "instead of random ones; its sentencepiece model must be the one --data was encoded "
        "with. A checkpoint to resume takes precedence",
    )
    parser.add_argument("--keep-checkpoint", action="store_true")
    parser.add_argument("--pretokenizer", choices=PRETOKENIZERS, default=None)
    parser.add_argument("--no-lowercase", action="store_true")
    parser.add_argument("--max-length", type=int, default=100)
    group = parser.add_argument_group("hyperparameters (defaults: the paper's)")
    for field in fields(TrainConfig):
        default = field.default if field.default is not MISSING else None
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            # (--max-steps 0 would write a bundle of untrained, random weights)
            type=positive_int if field.name == "max_steps" else _TYPES[field.type],
            default=default,
            help=f"default: {default}",
        )
