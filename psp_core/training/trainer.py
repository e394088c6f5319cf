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
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from psp_core.devices import resolve_device
from psp_core.inference.model import PSPModel
from psp_core.models.bundle import BundleConfig, check_bundle_output, save_bundle
from psp_core.models.model_card import CardFacts, model_card
from psp_core.tokenization.tokenizer import Tokenizer, sha256_file
from psp_core.training.candidate_memory import COUNTERS, CandidateMemory, mining_record
from psp_core.training.checkpoint import (
    DATA_KEY,
    CheckpointStore,
    TrainingState,
    check_checkpoint_directory,
)
from psp_core.training.config import TrainConfig
from psp_core.training.data import EpochStream, PairBatch
from psp_core.training.distributed import DistributedContext, distributed_training, tensor_digest
from psp_core.training.encoder import MeanEmbeddingEncoder
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


def default_pretokenizer(lang: str) -> str:
    return "jieba" if lang.split("-")[-1].startswith("zh") else "none"


def languages_of(lang: str, kind: str, groups: tuple[str, ...] = ()) -> list[str]:
    if groups:  # a mixed file: its groups are its languages, English on every bitext side
        return sorted({"en", *groups})
    if kind == "paraphrase":
        return [lang]
    return ["en", lang] if lang != "en" else ["en"]


def epoch_summary(record: dict) -> str:
    """One epoch's record as the log line a person reads: ``epoch 3 done at step 1,865, loss
    0.5123, 2,631 pairs/s, 36.2 s, dev score 82.41`` (epochs counted from 1, as the tables)."""
    parts = [f"epoch {record['epoch'] + 1} done at step {record['steps']:,}"]
    if record.get("loss") is not None:
        parts.append(f"loss {record['loss']:.4f}")
    if record.get("pairs_per_second") is not None:
        parts.append(f"{record['pairs_per_second']:,.0f} pairs/s")
    if record.get("seconds") is not None:
        parts.append(f"{record['seconds']:.1f} s")
    if record.get("dev_score") is not None:
        parts.append(f"dev score {record['dev_score']:.2f}")
    mining = record.get("mining")
    if mining:
        text = f"mega-batches mined exactly {mining['exact']}"
        if mining.get("failed"):
            text += f" ({mining['failed']} after a failed check)"
        text += f", from remembered candidates {mining['reused']}"
        if mining.get("sampled_agreement") is not None:
            text += f" (sampled agreement {100 * mining['sampled_agreement']:.1f}%)"
        parts.append(text)
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
) -> TrainResult:
    """Train a P-SP model on a training HDF5 and write a model bundle to ``output_dir``.

    Args:
        data_path: the training HDF5 (DESIGN section 4).
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

    Started by ``torchrun`` with several processes, this trains data-parallel (see
    :mod:`psp_core.training.distributed`): each step trains ``world_size`` mini-batches of
    ``batch_size`` pairs, one per rank; rank 0 writes checkpoints, the bundle and the logs.
    """
    config = config or TrainConfig()
    output_dir = Path(output_dir)
    checkpoint_dir = Path(checkpoint_dir or default_checkpoint_dir(output_dir))
    inputs = (data_path, spm_path)
    check_bundle_output(output_dir, overwrite=overwrite, inputs=inputs, what="output bundle")
    check_checkpoint_directory(checkpoint_dir, overwrite=overwrite, inputs=(*inputs, output_dir))
    store = CheckpointStore(checkpoint_dir)
    with (
        distributed_training(resolve_device(config.device)) as (distributed, device),
        torch_threads(config.num_threads),
        TrainingFile(data_path) as data,
    ):
        info = data.info
        main = distributed.is_main
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
        group_rules = tuple(
            config.negatives_from or ("any" if kind == "paraphrase" else "opposite")
            for kind in info.group_kinds
        )
        if info.groups:
            # each group mines among its kind's pairs, or (negatives_within="language") its own
            kinds = sorted(set(info.group_kinds))
            by_language = config.negatives_within == "language"
            group_keys = tuple(
                index if by_language else kinds.index(kind)
                for index, kind in enumerate(info.group_kinds)
            )
            negatives_from = "by kind, within the " + config.negatives_within
        else:
            group_keys = ()
            negatives_from = config.negatives_from or (
                "any" if info.kind == "paraphrase" else "opposite"
            )
        if config.mining_candidates and (info.groups or distributed.is_distributed):
            raise ValueError(
                "mining_candidates works on a one-language training file in one process; "
                f"{data_path} "
                + ("holds several languages" if info.groups else "is trained by several processes")
                + ": set mining_candidates to 0"
            )
        fingerprint = {
            **config.fingerprint(),
            "negatives_from": negatives_from,
            "n_pairs": info.n_pairs,
            "spm_sha256": info.spm_sha256,
            # the whole file's bytes (0.06 s for a million pairs): a checkpoint of the same
            # pairs in another order must not be resumed
            DATA_KEY: distributed.broadcast_object(sha256_file(data_path) if main else None),
        }
        if distributed.is_distributed:
            # the effective batch is batch_size x world_size: resume with the same world
            fingerprint["world_size"] = distributed.world_size

        torch.manual_seed(config.seed)
        model = MeanEmbeddingEncoder(
            info.vocab_size,
            config.dim,
            dropout=config.dropout,
            piece_dropout=config.piece_dropout,
            sparse=config.optimizer == "sparse",
        )
        model.reset_parameters(torch.Generator().manual_seed(config.seed))
        model.to(device)
        optimizer = build_optimizer(model, config.optimizer, config.lr)
        # every rank resumes from the same checkpoint, or none does
        if distributed.broadcast_object(resume and store.exists()):
            state = store.restore(model.weight, optimizer, fingerprint)
            log.info("resuming from %s at epoch %d step %d", store.latest, state.epoch, state.step)
        else:
            if distributed.is_main:
                store.remove()
            state = TrainingState()

        schedule = MegabatchSchedule(config.max_megabatch, config.anneal_every)
        memory = None
        if config.mining_candidates:
            memory = CandidateMemory(
                checkpoint_dir,
                k=config.mining_candidates,
                slot_pairs=config.max_megabatch * config.batch_size,
                n_pairs=len(data),
                slots=state.candidate_slots,
                counters=state.epoch_mining,
                seed=config.seed,
            )
            for name in COUNTERS:
                state.epoch_mining.setdefault(name, 0)
        settings = StepSettings.from_config(
            config,
            device=device,
            negatives_from=negatives_from,
            distributed=distributed,
            group_rules=group_rules,
            group_keys=group_keys,
        )
        pairs_per_step = config.batch_size * distributed.world_size
        epoch_steps = math.ceil(len(data) / pairs_per_step)
        total_steps = epoch_steps * config.epochs
        if config.max_steps is not None:
            total_steps = min(total_steps, config.max_steps)

        def set_learning_rate(step: int) -> None:
            # over every epoch's steps: a max_steps stop resumes on the same schedule
            rate = learning_rate_at(step, epoch_steps * config.epochs, config.lr, config.lr_decay)
            for group in optimizer.param_groups:
                group["lr"] = rate

        set_learning_rate(state.step)

        def step_hook(step: int, loss: float) -> None:
            set_learning_rate(step)
            progress(step, loss)
            if on_step is not None:
                on_step(step, loss)

        stopped_early = False
        while state.epoch < config.epochs and not stopped_early:
            stream = EpochStream(
                data,
                seed=config.seed,
                # remembered candidates keep each mega-batch's pairs: every epoch reads the
                # first epoch's order (each mega-batch's mini-batches reshuffled instead)
                epoch=0 if memory is not None else state.epoch,
                block_size=config.shuffle_block,
                start=state.position,
            )
            progress = TrainingProgress(
                epoch=state.epoch,
                epochs=config.epochs,
                first_step=state.step,
                epoch_steps=epoch_steps,
                total_steps=total_steps,
                pairs_per_step=pairs_per_step,
                megabatch_at=schedule.size_at,
                every=config.log_every if main else 0,
                seconds=config.log_seconds if main else 0.0,
            )
            last_checkpoint = state.step
            # the epoch's clock, counting the seconds it ran before a resume
            epoch_started = progress.started - state.epoch_seconds
            while True:
                if config.max_steps is not None and state.step >= config.max_steps:
                    stopped_early = True
                    break
                mega = stream.take(
                    schedule.size_at(state.step) * config.batch_size * distributed.world_size
                )
                if len(mega) == 0:
                    break
                shard = _shard(mega, distributed)
                miner = order = None
                slot = memory.slot_of(state.position, len(mega)) if memory is not None else None
                if slot is not None:
                    chunk = config.mining_chunk_rows
                    miner = memory.miner(slot, state.epoch, negatives_from, chunk)
                    order = memory.order(slot, state.epoch, len(mega))
                if len(shard) > 0:
                    losses = train_megabatch(
                        model,
                        optimizer,
                        shard,
                        settings,
                        first_step=state.step,
                        on_step=step_hook,
                        miner=miner,
                        order=order,
                    )
                    for loss in losses:  # in order: a resumed epoch adds up the same way
                        state.epoch_loss_sum += loss
                    state.epoch_loss_count += len(losses)
                    state.step += len(losses)
                state.position += len(mega)
                if (
                    config.checkpoint_every
                    and state.step - last_checkpoint >= config.checkpoint_every
                ):
                    state.epoch_seconds = time.perf_counter() - epoch_started
                    _save(store, distributed, model, optimizer, state, fingerprint, memory)
                    last_checkpoint = state.step
            if stopped_early:
                state.epoch_seconds = time.perf_counter() - epoch_started
                _save(store, distributed, model, optimizer, state, fingerprint, memory)
                break
            count = state.epoch_loss_count
            elapsed = time.perf_counter() - epoch_started
            record = {
                "epoch": state.epoch,
                "steps": state.step,
                "loss": state.epoch_loss_sum / count if count else None,
                "pairs_per_second": count * pairs_per_step / max(elapsed, 1e-9) if count else None,
                "seconds": round(elapsed, 3),
            }
            if memory is not None:
                record["mining"] = mining_record(state.epoch_mining)
            if dev_evaluator is not None:
                # evaluated on rank 0; all ranks keep the same best-epoch bookkeeping
                score = None
                if main:
                    score = float(dev_evaluator(_snapshot(model, tokenizer, info, config)))
                score = distributed.broadcast_object(score)
                record["dev_score"] = score
                if state.best_score is None or score > state.best_score:
                    state.best_score, state.best_epoch = score, state.epoch
                    if main:
                        store.save_best(model.weight, state.epoch, score)
            if main:
                log.info("%s", epoch_summary(record))
                log.info("end of %s", progress.line(state.step))
            state.history.append(record)
            state.epoch += 1
            state.position = 0
            state.epoch_loss_sum, state.epoch_loss_count, state.epoch_seconds = 0.0, 0, 0.0
            for name in state.epoch_mining:
                state.epoch_mining[name] = 0
            _save(store, distributed, model, optimizer, state, fingerprint, memory)

        bundle = output_dir
        if distributed.is_distributed:
            log.info(
                "rank %d final weights sha256 %s", distributed.rank, tensor_digest(model.weight)
            )
        if main:
            weights = model.weight.detach().cpu()
            if dev_evaluator is not None and state.best_epoch is not None:
                weights = store.load_best()
            summary = _training_summary(info, config, state, negatives_from, distributed)
            summary["device"] = str(device)
            bundle_config = _bundle_config(tokenizer, info, config, summary)
            seconds = sum(float(h.get("seconds") or 0.0) for h in state.history)
            facts = CardFacts(
                name=f"psp-{info.lang}",
                training={"device": str(device), "seconds": seconds or None},
            )
            card = model_card(bundle_config, facts)
            bundle = save_bundle(
                output_dir,
                weights.numpy(),
                tokenizer.model_proto,
                bundle_config,
                card,
                overwrite=overwrite,
            )
            if not keep_checkpoint and not stopped_early:
                store.remove()
        distributed.barrier()
    return TrainResult(bundle=bundle, state=state, rank=distributed.rank)


def _shard(mega: PairBatch, distributed: DistributedContext) -> PairBatch:
    """This rank's contiguous share of a mega-batch taken for all ranks.

    Every rank gets the same number of pairs (so all run the same number of steps); at the end
    of an epoch the last ``len(mega) % world_size`` pairs (fewer than ``world_size``) are skipped.
    """
    if not distributed.is_distributed:
        return mega
    size = len(mega) // distributed.world_size
    return mega.slice(distributed.rank * size, (distributed.rank + 1) * size)


def _save(store, distributed, model, optimizer, state, fingerprint, memory=None) -> None:
    """Rank 0 writes the checkpoint (the replicas are identical); the others wait for it.
    Remembered candidates reach the disk first: the state written names them."""
    if memory is not None:
        memory.flush()
    if distributed.is_main:
        store.save(model.weight, optimizer, state, fingerprint)
    distributed.barrier()


def _bundle_config(tokenizer, info, config, training=None) -> BundleConfig:
    return BundleConfig(
        dim=config.dim,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lowercase=tokenizer.lowercase,
        pretokenizer=tokenizer.pretokenizer_name,
        max_length=tokenizer.max_length,
        languages=languages_of(info.lang, info.kind, info.groups),
        training=training or {},
    )


def _training_summary(info, config, state, negatives_from, distributed) -> dict:
    return {
        "config": config.to_dict(),
        "world_size": distributed.world_size,
        "negatives_from": negatives_from,
        "data": asdict(info),
        "epochs_completed": state.epoch,
        "steps": state.step,
        "best_epoch": state.best_epoch,
        "best_score": state.best_score,
        "history": state.history,
    }


def _snapshot(model, tokenizer, info, config) -> PSPModel:
    """The model as it is now, for a dev evaluation (shares the weights, no copy on CPU)."""
    weights = model.weight.detach().cpu().numpy()
    return PSPModel(tokenizer, weights, _bundle_config(tokenizer, info, config))
