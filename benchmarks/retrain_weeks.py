"""Weeks of arriving bitext: the incremental retrain chain against full retrains of the same
data, week by week, on the shared en-de pairs (dev data only: no test set is scored).

For each seed the de pairs are put in a seeded order; week 0 is the first ``--start-share`` of
them as the language's bitext (a ``source = "local"`` folder), and each week 1..``--weeks`` drops
the next ``--week-share`` into the storage root's inbox as a new file, as a user does. Two
chains per seed, each in its own storage root, run the real assets of the language's model
(``dagster.materialize``, partition ``de``, ``model_evaluation`` left out: it scores the test
sets):

* week 0 is one full training per seed (``retrain: auto`` with no promoted version), whose
  storage root is then copied as the start of every chain of that seed: trained once, not once
  per chain;
* the **incremental** chain runs every later week with ``retrain: incremental`` (it never
  chooses full by ``auto``'s rules); what ``auto`` would have decided is recorded beside it: its
  rules about the registry (:func:`assets.stages.retrain_plan.rule_before_data`) before the run, else
  the plan's own decision (new pairs, the vocabulary's fit);
* the **full** chain runs every later week with ``retrain: full`` on the same data. It does not
  depend on the variant: one per seed, shared by every variant.

A variant (``--variants``, comma-separated; each ``key=value`` joined by ``:``) sets, for the
incremental chain only, ``replay`` (the registry's ``[retrain] replay_share``), ``lr`` and
``epochs`` (psp_model's run config). The seed orders the pairs and seeds both the packed file's
shuffle (``training_data``'s ``seed``) and the training itself (the registry's
``[defaults.training] seed``: initialisation and data order). The promotion gate runs as in
production (the registry's tolerance); its decisions are read from the registry's history.

Every (variant, seed, chain) keeps its finished weeks in a JSON file under ``--results-dir``,
written as each week ends: a rerun skips the finished weeks and continues a killed one (its
stages and the training's checkpoint are reused by the pipeline itself).

    python benchmarks/retrain_weeks.py                                    # 3 seeds, 8 weeks
    python benchmarks/retrain_weeks.py --variants replay=0.5,replay=0.25:lr=0.025

Prints one JSON object: per variant, per week, the two chains side by side (mean over the
seeds and per seed), and the summary the goals are judged on: the incremental training seconds
as a share of the full retrain's, the dev-mean gap at the last week, the largest fall of an
incremental version below the version it replaced, the gate's tolerance
(benchmarks/RESULTS.md#retrain-weeks).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402

LANG = "de"
#: the goals: an incremental retrain's training time at most this share of a full retrain's;
#: after the last week its dev mean at most this many points below the full retrain's
GOAL_TRAINING_SHARE = 0.25
GOAL_DEV_MEAN_GAP = 0.3
QUICK_PAIRS = 3000
#: the stages of the language's model job that score test sets, left out
LEFT_OUT = ("model_evaluation",)
VARIANT_KEYS = {"replay": float, "lr": float, "epochs": int}


@dataclass(frozen=True)
class Variant:
    """The incremental chain's settings: the registry's replay share, psp_model's lr and epochs
    (None: the registry's default, the profile's)."""

    name: str
    replay: float | None = None
    lr: float | None = None
    epochs: int | None = None

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.name)

    def model_config(self) -> dict:
        return {k: v for k, v in (("lr", self.lr), ("epochs", self.epochs)) if v is not None}


def parse_variant(text: str) -> Variant:
    """``replay=0.5:lr=0.025:epochs=2`` (any of the keys, ``default`` for none).

    Raises:
        ValueError: an unknown key or a value of the wrong type.
    """
    settings: dict = {}
    for part in filter(None, text.strip().split(":")):
        if part == "default":
            continue
        key, sep, value = part.partition("=")
        if not sep or key not in VARIANT_KEYS:
            raise ValueError(f"variant {text!r}: {part!r} is not one of {sorted(VARIANT_KEYS)}=N")
        try:
            settings[key] = VARIANT_KEYS[key](value)
        except ValueError:
            raise ValueError(f"variant {text!r}: {key} must be a number, got {value!r}") from None
    if "replay" in settings and not 0.0 <= settings["replay"] < 1.0:
        raise ValueError(f"variant {text!r}: replay must be in [0, 1)")
    return Variant(name=text.strip(), **settings)


# --------------------------------------------------------------------------------------------
# the data of a seed


def week_slices(n: int, start: float, share: float, weeks: int) -> list[tuple[int, int]]:
    """``[begin, end)`` of each week's pairs in the seed's order: week 0 the first ``start`` of
    the ``n`` pairs, each later week the next ``share``."""
    bounds = [round(n * start)] + [round(n * (start + share * w)) for w in range(1, weeks + 1)]
    return [(0, bounds[0])] + list(zip(bounds, bounds[1:], strict=False))


def write_text(path: Path, lines: list[str], compress: bool = False) -> None:
    """``lines`` to ``path`` under a hidden temporary name, renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    opener = gzip.open if compress else open
    with opener(tmp, "wt", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    os.replace(tmp, path)


def seed_data(folder: Path, english: list[str], german: list[str], seed: int, slices: list) -> Path:
    """Week 0's bitext as ``folder/bitext/combined.{en,de}.gz`` and each later week's as
    ``folder/weeks/weekNN.{en,de}``, in the seed's order (written once; returns the bitext
    folder)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(english))
    bitext = folder / "bitext"
    for week, (begin, end) in enumerate(slices):
        chosen = order[begin:end]
        for code, lines in (("en", english), (LANG, german)):
            if week == 0:
                path, compress = bitext / f"combined.{code}.gz", True
            else:
                path, compress = folder / "weeks" / f"week{week:02d}.{code}", False
            if not path.is_file():
                write_text(path, [lines[i] for i in chosen], compress)
    return bitext


def drop_week(folder: Path, root: Path, week: int) -> None:
    """Week ``week``'s files into ``root``'s inbox (copied under a hidden name, renamed)."""
    inbox = root / "inbox" / LANG
    inbox.mkdir(parents=True, exist_ok=True)
    for code in ("en", LANG):
        name = f"week{week:02d}.{code}"
        if not (inbox / name).is_file():
            tmp = inbox / f".{name}.tmp-{os.getpid()}"
            shutil.copyfile(folder / "weeks" / name, tmp)
            os.replace(tmp, inbox / name)


def registry_file(path: Path, bitext: Path, args, seed: int, replay: float | None) -> Path:
    """The offline registry with de reading ``bitext``, the training seeded by ``seed`` and,
    when given, de's ``[retrain] replay_share``."""
    text = _common.offline_registry_text(args.data_dir, {LANG: bitext})
    head, table, tail = text.partition("[defaults.training]\n")
    block = re.match(r"(?:[^\[\n].*\n|\n)*", tail).group()  # up to the next table
    rest = tail[len(block) :]
    block, found = re.subn(r"^seed = \d+$", f"seed = {seed}", block, count=1, flags=re.MULTILINE)
    if not table or not found:
        raise SystemExit(f"{_common.OFFLINE_REGISTRY}: no [defaults.training] seed to set")
    seeded = head + table + block + rest
    if replay is not None:  # (into de's own [retrain] table where the registry has one)
        header = f"[languages.{LANG}.retrain]\n"
        line = f"replay_share = {replay}\n"
        if header in seeded:
            seeded = seeded.replace(header, header + line, 1)
        else:
            seeded += f"\n{header}{line}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != seeded:
        write_text(path, seeded.splitlines())
    return path


# --------------------------------------------------------------------------------------------
# one week of one chain


class Pipeline:
    """The language's model assets, materialized in-process with an ephemeral instance."""

    def __init__(self, quick: bool) -> None:
        from dagster import DagsterInstance

        from pipelines.definitions import defs

        keys = defs.resolve_job_def("psp_language_job").asset_layer.executable_asset_keys
        self.assets = [defs.get_assets_def(k) for k in keys if k.to_user_string() not in LEFT_OUT]
        self.instance = DagsterInstance.ephemeral()
        self.quick = quick

    def run(self, root: Path, registry: Path, run_config: dict) -> float:
        """Materialize partition de in storage root ``root`` with registry ``registry``;
        returns the job's wall seconds."""
        from dagster import materialize

        from assets.settings.resources import ComputeResource, StorageResource, default_resources

        os.environ["PSP_LANGUAGES"] = str(registry)
        resources = default_resources(str(root))
        resources["storage"] = StorageResource(root=str(root))
        if self.quick:  # worker processes cost more than a slice of pairs: the ops run inline
            resources["compute"] = ComputeResource(workers=1)
        started = time.perf_counter()
        result = materialize(
            self.assets,
            partition_key=LANG,
            resources=resources,
            instance=self.instance,
            run_config=run_config,
        )
        if not result.success:
            raise SystemExit(f"the language job failed in {root}")
        return time.perf_counter() - started


def run_config(seed: int, retrain: str, model: dict | None = None) -> dict:
    ops = {
        "retrain_plan": {"config": {"retrain": retrain}},
        "training_data": {"config": {"seed": seed}},
    }
    if model:
        ops["psp_model"] = {"config": dict(model)}
    return {"ops": ops}


def auto_would(registry, full_every: int) -> dict | None:
    """What ``retrain: auto`` would decide from the registry alone, before a run (None: the
    plan's reading of the pairs decides)."""
    from assets.stages.retrain_plan import rule_before_data

    decided = rule_before_data("auto", registry, registry.promoted(), full_every)
    return None if decided is None else {"mode": "full", "rule": decided[0], "reason": decided[1]}


def _gain(name: str, candidate: dict, incumbent: dict) -> float:
    """How much better the candidate's score ``name`` is (an error rate: lower is better)."""
    from psp_core.evaluation.dev_suite import is_lower_better as lower_is_better

    gain = candidate[name] - incumbent[name]
    return -gain if lower_is_better(name) else gain


def gate_of(history: list, version_id: str) -> dict:
    """The gate's decision on ``version_id``: promoted or not, why, and the candidate's dev
    mean and worst single score against the incumbent's, both scored on the same dev pairs."""
    from psp_core.evaluation.dev_suite import dev_mean
    from psp_core.models.registry import last_decision

    decided = last_decision(history, version_id) or {}
    gate = {"promoted": decided.get("action") == "promote", "reason": decided.get("reason")}
    scores = decided.get("scores") or {}
    candidate, incumbent = scores.get("candidate") or {}, scores.get("incumbent") or {}
    if candidate and incumbent:
        gate["dev_mean_vs_replaced"] = round(
            dev_mean(candidate, None) - dev_mean(incumbent, None), 3
        )
        common = set(candidate) & set(incumbent)
        gate["worst_score_vs_replaced"] = round(
            min(_gain(k, candidate, incumbent) for k in common), 3
        )
    return gate


def week_row(root: Path, job_seconds: float | None, auto: dict | None) -> dict:
    """The newest version of ``root``'s de model: its lineage, training, dev scores and the
    gate's decision (and what ``auto`` would have decided, when given)."""
    from assets.framework.stage import read_manifest
    from psp_core.evaluation.dev_suite import dev_mean
    from psp_core.models.registry import ModelRegistry

    registry = ModelRegistry(root / LANG / "psp_model")
    version = registry.versions()[-1]
    record = version.info["record"]
    window = record.get("training_window") or [0.0, 0.0]
    retrain = version.retrain or {}
    plan = read_manifest(root / LANG / "retrain_plan").record
    row = {
        "version": version.id,
        "mode": retrain.get("mode"),
        "parent": retrain.get("parent"),
        "retrain_reason": retrain.get("reason"),
        "new_pairs": retrain.get("new_pairs"),
        "replay_pairs": retrain.get("replay_pairs"),
        "steps": record.get("steps"),
        "training_seconds": round(window[1] - window[0], 2),
        "stage_seconds": record.get("seconds"),
        "job_seconds": None if job_seconds is None else round(job_seconds, 2),
        "dev_scores": version.dev_scores,
        "dev_mean": dev_mean(version.dev_scores, 3),
        "gate": gate_of(registry.history(), version.id),
    }
    if auto is not None or plan.get("setting") == "incremental":
        row["auto_would"] = auto or {k: plan.get(k) for k in ("mode", "rule", "reason")}
    if "vocabulary_fit" in plan:
        row["vocabulary_fit"] = plan["vocabulary_fit"]
    return row


# --------------------------------------------------------------------------------------------
# chains and their rows files


class Rows:
    """A chain's finished weeks, kept in a JSON file rewritten (temporary name, renamed) as each
    week ends; the settings they were made with must match a rerun's."""

    def __init__(self, path: Path, settings: dict) -> None:
        self.path, self.settings = path, settings
        self.weeks: dict[str, dict] = {}
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved.get("settings") != settings:
                raise SystemExit(
                    f"{path} holds weeks made with other settings ({saved.get('settings')}); "
                    "use another --results-dir or remove it"
                )
            self.weeks = saved["weeks"]

    def done(self, week: int) -> bool:
        return str(week) in self.weeks

    def add(self, week: int, row: dict) -> None:
        self.weeks[str(week)] = row
        write_text(self.path, [json.dumps({"settings": self.settings, "weeks": self.weeks})])


@dataclass
class Seed:
    """One seed's data, its week-0 training and its chains' storage roots."""

    seed: int
    folder: Path
    bitext: Path
    settings: dict

    def week0(self, pipeline: Pipeline, args) -> dict:
        rows = Rows(self.folder / "week0.json", self.settings)
        root = self.folder / "week0"
        if not rows.done(0):
            registry = registry_file(
                self.folder / "languages.toml", self.bitext, args, self.seed, None
            )
            seconds = pipeline.run(root, registry, run_config(self.seed, "auto"))
            rows.add(0, week_row(root, seconds, None))
        return rows.weeks["0"]

    def chain_root(self, name: str) -> Path:
        """The chain's storage root: a copy of week 0's the first time (links kept as links)."""
        root = self.folder / name / "storage"
        if not root.is_dir():
            for stale in root.parent.glob(".storage.tmp-*"):  # a copy cut short by a kill
                shutil.rmtree(stale, ignore_errors=True)
            tmp = root.with_name(f".storage.tmp-{os.getpid()}")
            shutil.copytree(self.folder / "week0", tmp, symlinks=True)
            os.replace(tmp, root)
        return root


def run_chain(pipeline: Pipeline, seed: Seed, args, variant: Variant | None) -> dict:
    """The full chain (``variant`` None) or a variant's incremental chain of ``seed``, weeks
    1..``args.weeks``; returns its rows, week 0's shared one first."""
    from assets.settings.languages import load_registry
    from psp_core.models.registry import ModelRegistry

    name = "full" if variant is None else f"incremental-{variant.slug}"
    chain = {"chain": name, "variant": None if variant is None else asdict(variant)}
    rows = Rows(seed.folder / name / "rows.json", seed.settings | chain)
    week0 = seed.week0(pipeline, args)
    if not rows.done(0):
        rows.add(0, week0 | {"shared_week0": True})
    replay = None if variant is None else variant.replay
    registry = registry_file(
        seed.folder / name / "languages.toml", seed.bitext, args, seed.seed, replay
    )
    full_every = load_registry(registry).languages[LANG].retrain.full_every
    for week in range(1, args.weeks + 1):
        if rows.done(week):
            continue
        root = seed.chain_root(name)
        drop_week(seed.folder / "data", root, week)
        models = ModelRegistry(root / LANG / "psp_model")
        made = len(models.versions())
        auto = None if variant is None else auto_would(models, full_every)
        if variant is None:
            config = run_config(seed.seed, "full")
        else:
            config = run_config(seed.seed, "incremental", variant.model_config())
        seconds = pipeline.run(root, registry, config)
        # no new version: the week had finished before a kill, only its row was not written
        resumed = len(models.versions()) == made
        row = week_row(root, None if resumed else seconds, auto)
        rows.add(week, row | ({"row_after_a_kill": True} if resumed else {}))
        print(
            f"seed {seed.seed} {name} week {week}: {json.dumps(row)}", file=sys.stderr, flush=True
        )
    return {int(w): r for w, r in rows.weeks.items() if int(w) <= args.weeks}


# --------------------------------------------------------------------------------------------
# the table and the summary


def mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 3) if values else None


def chain_mean(rows: list[dict]) -> dict:
    """The mean over seeds of one chain's week (each dev score, the dev mean, the costs) and
    how many of its versions the gate promoted."""
    out = {
        name: mean([row.get(name) for row in rows])
        for name in ("training_seconds", "stage_seconds", "job_seconds", "steps")
        + ("new_pairs", "replay_pairs", "dev_mean")
    }
    keys = sorted({key for row in rows for key in row["dev_scores"]})
    out["dev_scores"] = {key: mean([row["dev_scores"].get(key) for row in rows]) for key in keys}
    out["modes"] = sorted({str(row["mode"]) for row in rows})
    out["promoted"] = f"{sum(row['gate']['promoted'] for row in rows)} of {len(rows)}"
    auto = [row["auto_would"] for row in rows if row.get("auto_would")]
    if auto:  # (the incremental chain's: what retrain: auto would have run instead)
        out["auto_would"] = sorted({f"{a['mode']} ({a['rule']})" for a in auto})
    return out


def share(incremental: dict, full: dict, name: str = "training_seconds") -> float | None:
    """The incremental row's ``name`` as a share of the full row's."""
    if not full.get(name) or incremental.get(name) is None:
        return None
    return round(incremental[name] / full[name], 4)


def variant_table(chains: dict[int, dict], weeks: int) -> list[dict]:
    """Per week: the two chains' means over the seeds side by side, the incremental chain's
    training seconds as a share of the full chain's, and each seed's rows."""
    table = []
    for week in range(weeks + 1):
        seeds = [s for s, c in chains.items() if week in c["incremental"] and week in c["full"]]
        if not seeds:
            continue
        pair = {chain: [chains[s][chain][week] for s in seeds] for chain in ("incremental", "full")}
        rows = [(chains[s]["incremental"][week], chains[s]["full"][week]) for s in seeds]
        table.append(
            {
                "week": week,
                "seeds": seeds,
                "incremental": chain_mean(pair["incremental"]),
                "full": chain_mean(pair["full"]),
                "training_share": mean([share(*r) for r in rows]),
                # (the steps do not depend on the machine's load: the seconds do)
                "steps_share": mean([share(*r, name="steps") for r in rows]),
                "per_seed": {
                    str(s): {c: chains[s][c][week] for c in ("incremental", "full")} for s in seeds
                },
            }
        )
    return table


def variant_summary(chains: dict[int, dict], weeks: int, tolerance: float) -> dict:
    """What the goals are judged on: the incremental training seconds as a share of the full
    retrain's (weeks 1.. together), the dev-mean gap at the last week, the largest fall of an
    incremental version below the version it replaced (dev mean and worst single dev score,
    both re-scored by the gate on the same dev pairs), the refusals, any week the incremental
    chain trained in full and the weeks ``auto`` would have trained in full."""
    overall, steps, gaps, drops, worst, refused, fell_back = {}, {}, {}, [], [], [], []
    auto_full: list[dict] = []
    for seed, chain in chains.items():
        later = [w for w in range(1, weeks + 1) if w in chain["incremental"] and w in chain["full"]]
        if not later:
            continue
        inc = sum(chain["incremental"][w]["training_seconds"] for w in later)
        full = sum(chain["full"][w]["training_seconds"] for w in later)
        overall[str(seed)] = round(inc / full, 4) if full else None
        inc_steps = sum(chain["incremental"][w]["steps"] or 0 for w in later)
        full_steps = sum(chain["full"][w]["steps"] or 0 for w in later)
        steps[str(seed)] = round(inc_steps / full_steps, 4) if full_steps else None
        last = max(later)
        gap = chain["incremental"][last]["dev_mean"] - chain["full"][last]["dev_mean"]
        gaps[str(seed)] = {"week": last, "gap": round(gap, 3)}
        for week in later:
            row = chain["incremental"][week]
            gate = row["gate"]
            if "dev_mean_vs_replaced" in gate:
                drops.append((gate["dev_mean_vs_replaced"], seed, week))
                worst.append((gate["worst_score_vs_replaced"], seed, week))
            if not gate["promoted"]:
                refused.append({"seed": seed, "week": week, "reason": gate["reason"]})
            if row["mode"] != "incremental":
                fell_back.append({"seed": seed, "week": week, "reason": row["retrain_reason"]})
            if (row.get("auto_would") or {}).get("mode") == "full":
                auto_full.append({"seed": seed, "week": week, "rule": row["auto_would"]["rule"]})
    low, low_score = min(drops, default=None), min(worst, default=None)
    return {
        "training_share_overall": {"mean": mean(list(overall.values())), "per_seed": overall},
        "training_share_goal": GOAL_TRAINING_SHARE,
        "steps_share_overall": {"mean": mean(list(steps.values())), "per_seed": steps},
        "last_week_dev_mean_gap": {
            "mean": mean([g["gap"] for g in gaps.values()]),
            "per_seed": gaps,
            "goal": -GOAL_DEV_MEAN_GAP,
        },
        "largest_dev_mean_drop_below_replaced": None
        if low is None
        else {"value": low[0], "seed": low[1], "week": low[2]},
        "largest_single_score_drop_below_replaced": None
        if low_score is None
        else {"value": low_score[0], "seed": low_score[1], "week": low_score[2]},
        "gate_tolerance": tolerance,
        "refused": refused,
        "incremental_chain_weeks_trained_full": fell_back,
        # (retrain: auto would have trained these weeks in full, by the rule named)
        "auto_would_have_trained_full": auto_full,
    }


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    parser.add_argument("--weeks", type=int, default=8)
    parser.add_argument(
        "--variants",
        default="replay=0.5",
        help="comma-separated incremental settings, each replay=S, lr=X, epochs=N joined by "
        "':' (e.g. replay=0.5,replay=0.25:lr=0.025,replay=0.75:epochs=2); 'default' for the "
        "registry's and the profile's",
    )
    parser.add_argument("--start-share", type=float, default=0.6)
    parser.add_argument("--week-share", type=float, default=0.05)
    parser.add_argument("--profile", default="demo", choices=("smoke", "demo", "paper"))
    parser.add_argument("--output", type=Path)
    _common.add_data_arguments(parser)
    _common.add_quick_argument(
        parser,
        f"the first {QUICK_PAIRS:,} pairs, 2 weeks, seed 1, one variant, the smoke profile, the "
        "first 100 lines of the evaluation sets, data ops in one process",
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.weeks, args.profile = "1", min(args.weeks, 2), "smoke"
        args.variants = "replay=0.25:lr=0.02:epochs=1"
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
        args.variant_list = [parse_variant(v) for v in args.variants.split(",") if v.strip()]
    except ValueError as error:
        parser.error(str(error))
    if len({v.slug for v in args.variant_list}) < len(args.variant_list):
        parser.error(f"--variants names the same variant twice: {args.variants}")
    if args.weeks < 1 or not 0 < args.start_share < 1 or args.week_share <= 0:
        parser.error("--weeks must be >= 1, --start-share in (0, 1), --week-share > 0")
    if args.start_share + args.weeks * args.week_share > 1.0 + 1e-9:
        parser.error("--start-share + --weeks x --week-share is more than all the pairs")
    return args


def main() -> int:
    args = parse_args()
    if _common.require_data(args.data_dir, "bitext", f"en-{LANG}") is None:
        return 0
    args.data_dir = args.data_dir.resolve()
    work = (args.results_dir / ("quick-retrain-weeks" if args.quick else "retrain_weeks")).resolve()
    os.environ["PSP_PROFILE"] = args.profile
    os.environ["PSP_EVAL_DIR"] = str(_common.eval_dir_for(args).resolve())
    os.environ["PSP_PARANMT_URL"] = str(
        args.data_dir / "paraphrase" / "paranmt-format-sample.txt.gz"
    )
    english, german = _common.read_bitext(args.data_dir, LANG, QUICK_PAIRS if args.quick else None)
    slices = week_slices(len(english), args.start_share, args.week_share, args.weeks)
    out: dict = {
        "machine": _common.machine_info(),
        "pairs": len(english),
        "weeks": args.weeks,
        "week_pairs": [end - begin for begin, end in slices],
        "profile": args.profile,
        "seeds": args.seed_list,
        "work": str(work),
    }
    pipeline = Pipeline(args.quick)
    chains: dict[str, dict[int, dict]] = {v.name: {} for v in args.variant_list}
    for seed in args.seed_list:
        folder = work / f"seed-{seed}"
        bitext = seed_data(folder / "data", english, german, seed, slices)
        settings = {"seed": seed, "pairs": len(english), "profile": args.profile}
        settings |= {"start_share": args.start_share, "week_share": args.week_share}
        state = Seed(seed, folder, bitext, settings)
        full = run_chain(pipeline, state, args, None)
        for variant in args.variant_list:
            incremental = run_chain(pipeline, state, args, variant)
            chains[variant.name][seed] = {"incremental": incremental, "full": full}
    from assets.settings.languages import load_registry

    registry = work / f"seed-{args.seed_list[0]}" / "languages.toml"
    tolerance = load_registry(registry).languages[LANG].promotion.tolerance
    out["variants"] = {
        name: {
            "weeks": variant_table(per_seed, args.weeks),
            "summary": variant_summary(per_seed, args.weeks, tolerance),
        }
        for name, per_seed in chains.items()
    }
    out["load_average_at_end"] = os.getloadavg()
    if args.output:
        write_text(args.output, [json.dumps(out, indent=1)])
    _common.emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
