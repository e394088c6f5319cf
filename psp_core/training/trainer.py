"""The training loop: data, model, optimizer, schedule and checkpoints wired together.

Each of those is its own piece (``data.EpochStream``, ``encoder.MeanEmbeddingEncoder``,
``optim``, ``schedule.MegabatchSchedule``, ``checkpoint.CheckpointStore``); this module only
drives them, epoch by epoch and mega-batch by mega-batch.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from psp_core.devices import resolve_device
from psp_core.files.file_lock import LockHeld, exclusive_lock
from psp_core.files.output_files import check_outputs_apart
from psp_core.files.output_targets import OutputError, resolve_output
from psp_core.inference.model import PSPModel
from psp_core.models.bundle import BundleConfig, check_bundle_output, save_bundle
from psp_core.models.model_card import CardFacts, model_card
from psp_core.tokenization.tokenizer import Tokenizer, sha256_file
from psp_core.training.checkpoint import (
    DATA_KEY,
    CheckpointDamagedError,
    CheckpointStore,
    TrainingState,
    check_checkpoint_directory,
)
from psp_core.training.config import TrainConfig
from psp_core.training.data import EpochStream, PairBatch
from psp_core.training.distributed import (
    DistributedContext,
    context_from_environment,
    distributed_training,
    tensor_digest,
)
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.init_from import INIT_KEY, InitialWeights, load_initial_weights
from psp_core.training.optim import build_optimizer
from psp_core.training.progress import TrainingProgress
from psp_core.training.schedule import MegabatchSchedule, learning_rate_at
from psp_core.training.steps import StepSettings, train_megabatch
from psp_core.training.training_file import TrainingFile

log = logging.getLogger(__name__)

DevEvaluator = Callable[[PSPModel], float]


@dataclass
class TrainResult:
    bundle: Path
    state: TrainingState
    rank: int = 0  # this process's rank under torchrun (only rank 0 writes the bundle)


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Use ``count`` torch threads inside the block (None: leave as is), then restore."""
    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def default_checkpoint_dir(output_dir: str | Path) -> Path:
    """Where :func:`train` keeps checkpoints unless told: ``<output_dir>.checkpoint`` beside it."""
    output_dir = Path(output_dir)
    return output_dir.with_name(output_dir.name + ".checkpoint")


def training_lock(path: str | Path) -> Path:
    """The lock file of an output being trained (``.NAME.lock`` beside it, beside the target
    of a link: a link and its target are one output)."""
    target = resolve_output(path).target or Path(path).absolute()
    return target.with_name(f".{target.name}.lock")


@contextmanager
def training_locks(output_dir: Path, checkpoint_dir: Path) -> Iterator[None]:
    """Hold the locks of the bundle and of the checkpoint folder while training: a second
    training onto either stops at once with one line, before touching them, rather than
    writing checkpoints beside the first's. A lock is an ``flock`` the kernel drops when its
    holder dies (``kill -9`` leaves no stale lock); under torchrun rank 0 holds them."""
    if not context_from_environment().is_main:
        yield
        return
    with ExitStack() as held:
        for path, what in ((output_dir, "output bundle"), (checkpoint_dir, "checkpoint directory")):
            lock = training_lock(path)
            lock.parent.mkdir(parents=True, exist_ok=True)
            try:
                held.enter_context(exclusive_lock(lock, wait=False))
            except LockHeld:
                raise OutputError(
                    f"{what} {path} is being written by another training run (it holds the lock "
                    f"{lock}); wait for it to end, or train into another folder"
                ) from None
        yield


def default_pretokenizer(lang: str) -> str:
    return "jieba" if lang.split("-")[-1].startswith("zh") else "none"


def languages_of(lang: str, kind: str, groups: tuple[str, ...] = ()) -> list[str]:
    if groups:  # a mixed file: its groups are its languages, English on every bitext side
        return sorted({"en", *groups})
    if kind == "paraphrase":
        return [lang]
    return ["en", lang] if lang != "en" else ["en"]


def epoch_summary(record: dict) -> str:
    """One epoch's record as the log line a person reads: ``epoch 3 done at step 1,865, mean loss
    0.5123, 2,631 pairs/s, 36.2 s, dev score 82.41`` (epochs counted from 1, as the tables; the
    loss is the mean over the whole epoch, where a progress line's is over its last steps)."""
    parts = [f"epoch {record['epoch'] + 1} done at step {record['steps']:,}"]
    if record.get("loss") is not None:
        parts.append(f"mean loss {record['loss']:.4f}")
    if record.get("pairs_per_second") is not None:
        parts.append(f"{record['pairs_per_second']:,.0f} pairs/s")
    if record.get("seconds") is not None:
        parts.append(f"{record['seconds']:.1f} s")
    if record.get("dev_score") is not None:
        parts.append(f"dev score {record['dev_score']:.2f}")
    return ", ".join(parts)


def train(
    data_path: str | Path,
    spm_path: str | Path,
    output_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    dev_evaluator: DevEvaluator | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    keep_checkpoint: bool = False,
    pretokenizer: str | None = None,
    lowercase: bool = True,
    max_length: int = 100,
    on_step: Callable[[int, float], None] | None = None,
    overwrite: bool = False,
    init_from: str | Path | None = None,
) -> TrainResult:
    """Train a P-SP model on a training HDF5 and write a model bundle to ``output_dir``.

    Args:
        data_path: the training HDF5 (docs/formats.md).
        spm_path: the sentencepiece model the file was encoded with (checked by sha256).
        output_dir: where the model bundle goes.
        config: hyperparameters (the paper's defaults when omitted).
        dev_evaluator: called with the model after each epoch, higher is better (for example
            :class:`psp_core.evaluation.StsEvaluator` on STS 2017 en-en); the best epoch is kept.
        checkpoint_dir: where checkpoints go (default: ``<output_dir>.checkpoint`` beside it).
        resume: continue from the checkpoint there if one exists. It must have been written
            for the same training file (its sha256: the same pairs in the same order) and
            settings, otherwise :class:`~psp_core.training.checkpoint.CheckpointMismatchError`
            is raised.
        keep_checkpoint: keep the checkpoint after success (otherwise it is deleted).
        pretokenizer, lowercase, max_length: how sentences are tokenized at inference; they
            must match how the training file was encoded. ``pretokenizer=None`` picks jieba for
            Chinese and none otherwise.
        on_step: called as ``on_step(step, loss)`` after every optimizer step.
        overwrite: replace ``output_dir`` (and use ``checkpoint_dir``) even when it is a folder
            of other files. Without it such a folder is refused before any work
            (:class:`~psp_core.files.output_files.OutputError`); an earlier bundle is always replaced.
        init_from: a model bundle to start from instead of random weights: its embedding table,
            with a fresh optimizer (a bundle keeps no optimizer state; see
            :mod:`psp_core.training.init_from`). Its sentencepiece model must be the one the
            training file was encoded with and its dim ``config.dim``, otherwise
            :class:`~psp_core.training.init_from.InitFromMismatchError` is raised before any
            work. A checkpoint to resume takes precedence (it holds the run's later weights),
            and it must have been written by a run started from the same weights.

    Started by ``torchrun`` with several processes, this trains data-parallel (see
    :mod:`psp_core.training.distributed`): each step trains ``world_size`` mini-batches of
    ``batch_size`` pairs, one per rank; rank 0 writes checkpoints, the bundle and the logs.
    """
    config = config or TrainConfig()
    output_dir = Path(output_dir)
    checkpoint_dir = Path(checkpoint_dir or default_checkpoint_dir(output_dir))
    inputs = (data_path, spm_path, init_from)
    check_outputs_apart(output_dir, "output bundle", checkpoint_dir, "checkpoint directory")
    check_bundle_output(output_dir, overwrite=overwrite, inputs=inputs, what="output bundle")
    check_checkpoint_directory(checkpoint_dir, overwrite=overwrite, inputs=(*inputs, output_dir))
    store = CheckpointStore(checkpoint_dir)
    with (
        training_locks(output_dir, checkpoint_dir),
        distributed_training(resolve_device(config.device)) as (distributed, device),
        torch_threads(config.num_threads),
        TrainingFile(data_path) as data,
    ):
        tokenizer = _checked_tokenizer(
            data, data_path, spm_path, pretokenizer, lowercase, max_length
        )
        initial = None
        if init_from is not None:
            initial = load_initial_weights(init_from, data.info, config.dim, data_path)
        run = _TrainingRun(data, tokenizer, config, store, distributed, device, on_step)
        run.initial = initial
        run.start(data_path, resume)
        finished = run.all_epochs(dev_evaluator)
        bundle = output_dir
        if distributed.is_distributed:
            log.info(
                "rank %d final weights sha256 %s", distributed.rank, tensor_digest(run.model.weight)
            )
        if distributed.is_main:
            bundle = run.write_bundle(
                output_dir, best_epoch=dev_evaluator is not None, overwrite=overwrite
            )
            if not keep_checkpoint and finished:
                store.remove()
        distributed.barrier()
    return TrainResult(bundle=bundle, state=run.state, rank=distributed.rank)


def _checked_tokenizer(data, data_path, spm_path, pretokenizer, lowercase, max_length) -> Tokenizer:
    """The tokenizer of ``spm_path``, refused unless it is the one the training file was
    encoded with; an empty training file is refused too."""
    info = data.info
    tokenizer = Tokenizer.from_file(
        spm_path,
        lowercase=lowercase,
        pretokenizer=pretokenizer or default_pretokenizer(info.lang),
        max_length=max_length,
    )
    if tokenizer.sha256 != info.spm_sha256:
        raise ValueError(
            f"{data_path} was encoded with sentencepiece model sha256 {info.spm_sha256[:12]}..., "
            f"but {spm_path} has {tokenizer.sha256[:12]}..."
        )
    if tokenizer.vocab_size != info.vocab_size:
        raise ValueError(
            f"{data_path} says vocab_size {info.vocab_size}, {spm_path} has "
            f"{tokenizer.vocab_size} pieces"
        )
    if len(data) == 0:
        raise ValueError(f"{data_path} holds no pairs")
    return tokenizer


def negative_rules(config: TrainConfig, info) -> tuple[tuple[str, ...], tuple[int, ...], str]:
    """Where each pair's negatives come from: ``(group_rules, group_keys, negatives_from)``.

    A one-language file mines by its kind (bitext from the opposite side, paraphrases from any
    sentence) unless ``config.negatives_from`` says otherwise; a file of several languages mines
    each group among every pair of its kind in the mega-batch, whatever its language (mining
    within each language was tried and dropped: benchmarks/RESULTS.md#dropped)."""
    group_rules = tuple(
        config.negatives_from or ("any" if kind == "paraphrase" else "opposite")
        for kind in info.group_kinds
    )
    if not info.groups:
        negatives_from = config.negatives_from or (
            "any" if info.kind == "paraphrase" else "opposite"
        )
        return group_rules, (), negatives_from
    kinds = sorted(set(info.group_kinds))
    group_keys = tuple(kinds.index(kind) for kind in info.group_kinds)
    # the words checkpoints have always recorded for this rule
    return group_rules, group_keys, "by kind, within the megabatch"


class _TrainingRun:
    """One training run's pieces (data, model, optimizer, schedule, checkpoints, state) and its
    phases: :meth:`start` (a new model, or the checkpoint resumed), :meth:`all_epochs` and
    :meth:`write_bundle`."""

    def __init__(self, data, tokenizer, config, store, distributed, device, on_step) -> None:
        self.data, self.info, self.tokenizer = data, data.info, tokenizer
        self.config, self.store, self.distributed, self.device = config, store, distributed, device
        self.on_step = on_step
        self.group_rules, self.group_keys, self.negatives_from = negative_rules(config, data.info)
        self.pairs_per_step = config.batch_size * distributed.world_size
        self.epoch_steps = math.ceil(len(data) / self.pairs_per_step)
        self.total_steps = self.epoch_steps * config.epochs
        if config.max_steps is not None:
            self.total_steps = min(self.total_steps, config.max_steps)
        self.schedule = MegabatchSchedule(config.max_megabatch, config.anneal_every)
        self.progress: TrainingProgress | None = None
        #: the weights a new run starts from (None: random, from the seed)
        self.initial: InitialWeights | None = None

    def start(self, data_path, resume: bool) -> None:
        """The model and optimizer from the seed, then the checkpoint's weights, optimizer and
        state when one is resumed (every rank resumes from the same one, or none does)."""
        config, info, distributed = self.config, self.info, self.distributed
        self.fingerprint = {
            **config.fingerprint(),
            "negatives_from": self.negatives_from,
            "n_pairs": info.n_pairs,
            "spm_sha256": info.spm_sha256,
            # the whole file's bytes: a checkpoint of the same pairs in another order must not
            # be resumed
            DATA_KEY: distributed.broadcast_object(
                sha256_file(data_path) if distributed.is_main else None
            ),
        }
        if distributed.is_distributed:
            # the effective batch is batch_size x world_size: resume with the same world
            self.fingerprint["world_size"] = distributed.world_size
        if self.initial is not None:
            self.fingerprint[INIT_KEY] = self.initial.checksum
        torch.manual_seed(config.seed)
        self.model = MeanEmbeddingEncoder(
            info.vocab_size,
            config.dim,
            dropout=config.dropout,
            sparse=config.optimizer == "sparse",
        )
        self.model.reset_parameters(torch.Generator().manual_seed(config.seed))
        self.model.to(self.device)
        self.optimizer = build_optimizer(self.model, config.optimizer, config.lr)
        if distributed.broadcast_object(resume and self.store.exists()):
            self.state = self.store.restore(self.model.weight, self.optimizer, self.fingerprint)
            log.info(
                "resuming from %s at epoch %d step %d",
                self.store.resumed_from,
                self.state.epoch,
                self.state.step,
            )
        else:
            if distributed.is_main:
                self.store.remove()
            self.state = TrainingState()
            if self.initial is not None:
                with torch.no_grad():
                    self.model.weight.copy_(torch.from_numpy(self.initial.table))
                log.info("starting from the weights of %s", self.initial.bundle)
        self.settings = StepSettings.from_config(
            config,
            device=self.device,
            negatives_from=self.negatives_from,
            distributed=distributed,
            group_rules=self.group_rules,
            group_keys=self.group_keys,
        )
        self.set_learning_rate(self.state.step)

    def set_learning_rate(self, step: int) -> None:
        # over every epoch's steps: a max_steps stop resumes on the same schedule
        config = self.config
        rate = learning_rate_at(step, self.epoch_steps * config.epochs, config.lr, config.lr_decay)
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def step_done(self, step: int, loss: float) -> None:
        self.set_learning_rate(step)
        self.progress(step, loss)
        if self.on_step is not None:
            self.on_step(step, loss)

    def all_epochs(self, dev_evaluator: DevEvaluator | None) -> bool:
        """Train the remaining epochs; False when ``max_steps`` stopped the run first (its
        checkpoint saved)."""
        while self.state.epoch < self.config.epochs:
            if not self.epoch(dev_evaluator):
                return False
        return True

    def epoch(self, dev_evaluator: DevEvaluator | None) -> bool:
        """Train the rest of the current epoch, mega-batch by mega-batch, with a checkpoint
        every ``checkpoint_every`` steps; then record it. False when ``max_steps`` was
        reached (the checkpoint saved, the epoch not recorded)."""
        config, state, distributed = self.config, self.state, self.distributed
        stream = EpochStream(
            self.data,
            seed=config.seed,
            epoch=state.epoch,
            block_size=config.shuffle_block,
            start=state.position,
        )
        main = distributed.is_main
        self.progress = TrainingProgress(
            epoch=state.epoch,
            epochs=config.epochs,
            first_step=state.step,
            epoch_steps=self.epoch_steps,
            total_steps=self.total_steps,
            pairs_per_step=self.pairs_per_step,
            megabatch_at=self.schedule.size_at,
            every=config.log_every if main else 0,
            seconds=config.log_seconds if main else 0.0,
        )
        last_checkpoint = state.step
        # the epoch's clock, counting the seconds it ran before a resume
        started = self.progress.started - state.epoch_seconds
        while True:
            if config.max_steps is not None and state.step >= config.max_steps:
                state.epoch_seconds = time.perf_counter() - started
                self.save()
                return False
            size = self.schedule.size_at(state.step) * config.batch_size * distributed.world_size
            mega = stream.take(size)
            if len(mega) == 0:
                break
            self.megabatch(mega)
            if config.checkpoint_every and state.step - last_checkpoint >= config.checkpoint_every:
                state.epoch_seconds = time.perf_counter() - started
                self.save()
                last_checkpoint = state.step
        self.end_epoch(time.perf_counter() - started, dev_evaluator)
        return True

    def megabatch(self, mega: PairBatch) -> None:
        state = self.state
        shard = _shard(mega, self.distributed)
        if len(shard) > 0:
            losses = train_megabatch(
                self.model,
                self.optimizer,
                shard,
                self.settings,
                first_step=state.step,
                on_step=self.step_done,
            )
            for loss in losses:  # in order: a resumed epoch adds up the same way
                state.epoch_loss_sum += loss
            state.epoch_loss_count += len(losses)
            state.step += len(losses)
        state.position += len(mega)

    def end_epoch(self, elapsed: float, dev_evaluator: DevEvaluator | None) -> None:
        """The epoch's record (mean loss, pairs/s, seconds, dev score), the best epoch kept,
        the log line, and the checkpoint of the next epoch's start."""
        state, distributed = self.state, self.distributed
        count = state.epoch_loss_count
        record = {
            "epoch": state.epoch,
            "steps": state.step,
            "loss": state.epoch_loss_sum / count if count else None,
            "pairs_per_second": count * self.pairs_per_step / max(elapsed, 1e-9) if count else None,
            "seconds": round(elapsed, 3),
        }
        if dev_evaluator is not None:
            # evaluated on rank 0; all ranks keep the same best-epoch bookkeeping
            score = None
            if distributed.is_main:
                score = float(dev_evaluator(self.snapshot()))
            score = distributed.broadcast_object(score)
            record["dev_score"] = score
            if state.best_score is None or score > state.best_score:
                state.best_score, state.best_epoch = score, state.epoch
                if distributed.is_main:
                    self.store.save_best(self.model.weight, state.epoch, score)
        if distributed.is_main:
            log.info("%s", epoch_summary(record))
            log.info("end of %s", self.progress.line(state.step))
        state.history.append(record)
        state.epoch += 1
        state.position = 0
        state.epoch_loss_sum, state.epoch_loss_count, state.epoch_seconds = 0.0, 0, 0.0
        self.save()

    def save(self) -> None:
        """Rank 0 writes the checkpoint (the replicas are identical); the others wait for it."""
        if self.distributed.is_main:
            self.store.save(self.model.weight, self.optimizer, self.state, self.fingerprint)
        self.distributed.barrier()

    def snapshot(self) -> PSPModel:
        """The model as it is now, for a dev evaluation (shares the weights, no copy on CPU)."""
        weights = self.model.weight.detach().cpu().numpy()
        return PSPModel(self.tokenizer, weights, self.bundle_config())

    def bundle_config(self, training: dict | None = None) -> BundleConfig:
        tokenizer, info = self.tokenizer, self.info
        return BundleConfig(
            dim=self.config.dim,
            vocab_size=tokenizer.vocab_size,
            spm_sha256=tokenizer.sha256,
            lowercase=tokenizer.lowercase,
            pretokenizer=tokenizer.pretokenizer_name,
            max_length=tokenizer.max_length,
            languages=languages_of(info.lang, info.kind, info.groups),
            training=training or {},
        )

    def write_bundle(self, output_dir: Path, *, best_epoch: bool, overwrite: bool) -> Path:
        """The bundle of the final weights, or of the best epoch's when a dev score chose one,
        with its model card."""
        state = self.state
        weights = self.model.weight.detach().cpu()
        selection: dict = {}  # (with model selection: which epoch's weights, and why)
        if best_epoch and state.best_epoch is not None:
            try:
                weights = self.store.load_best(weights.shape)
                selection["weights_epoch"] = state.best_epoch
            except CheckpointDamagedError as damaged:
                # (the training is done and its final weights are whole: they are written,
                # and the summary says why the selected epoch's are not)
                best_lost = damaged.detail
                last = state.epoch if state.position else state.epoch - 1  # (0-based)
                selection = {"weights_epoch": last, "best_epoch_unavailable": best_lost}
                log.warning(
                    "the best epoch's table cannot be used (%s): the bundle gets the final "
                    "epoch's weights instead",
                    best_lost,
                )
        summary = {
            "config": self.config.to_dict(),
            "world_size": self.distributed.world_size,
            "negatives_from": self.negatives_from,
            "data": asdict(self.info),
            "epochs_completed": state.epoch,
            "steps": state.step,
            "best_epoch": state.best_epoch,
            "best_score": state.best_score,
            **selection,
            "history": state.history,
            "device": str(self.device),
        }
        if self.initial is not None:
            summary["init_from"] = self.initial.summary()
        bundle_config = self.bundle_config(summary)
        seconds = sum(float(h.get("seconds") or 0.0) for h in state.history)
        facts = CardFacts(
            name=f"psp-{self.info.lang}",
            training={"device": str(self.device), "seconds": seconds or None},
        )
        card = model_card(bundle_config, facts)
        return save_bundle(
            output_dir,
            weights.numpy(),
            self.tokenizer.model_proto,
            bundle_config,
            card,
            overwrite=overwrite,
        )


def _shard(mega: PairBatch, distributed: DistributedContext) -> PairBatch:
    """This rank's contiguous share of a mega-batch taken for all ranks.

    Every rank gets the same number of pairs (so all run the same number of steps); at the end
    of an epoch the last ``len(mega) % world_size`` pairs (fewer than ``world_size``) are skipped.
    """
    if not distributed.is_distributed:
        return mega
    size = len(mega) // distributed.world_size
    return mega.slice(distributed.rank * size, (distributed.rank + 1) * size)
