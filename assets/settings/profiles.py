"""Profiles: one run setting that picks the cost of a whole language run.

``smoke`` checks that everything runs (a tiny model, seconds of training), ``demo`` gives a
usable model on the shared data in minutes on a CPU, ``paper`` is the paper's settings
(the registry's values: vocabulary 50,000, dim 1024, 25 epochs) for users with the data and a
GPU, and the weekly schedule's profile.

A profile only fills the config fields a run leaves unset: a value in the run config
(``ops: {psp_model: {config: {epochs: 3}}}``) wins over the profile's, and the profile's over
the language registry's. Each stage's fingerprint holds the resolved settings, so switching
profiles recomputes exactly the stages whose settings change.
"""

from __future__ import annotations

import os
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field


class Profile(StrEnum):
    smoke = "smoke"
    demo = "demo"
    paper = "paper"


#: per profile, per asset, the config values it sets (unset: the registry's, i.e. the paper's).
#: What each costs on a CPU: benchmarks/RESULTS.md#profile-costs.
PROFILE_SETTINGS: MappingProxyType[Profile, dict[str, dict[str, Any]]] = MappingProxyType(
    {
        # a tiny model: checks that every stage runs, not what it learns
        Profile.smoke: {
            "sentencepiece_model": {"vocab_size": 500},
            "psp_model": {
                "dim": 32,
                "epochs": 1,
                "batch_size": 32,
                "max_megabatch": 4,
                "anneal_every": 0,
                "lr": 0.01,
            },
            "model_evaluation": {"speed_repeats": 1},
            "multi_sentencepiece_model": {"vocab_size": 1000},
            "multi_psp_model": {
                "dim": 32,
                "epochs": 1,
                "batch_size": 32,
                "max_megabatch": 4,
                "anneal_every": 0,
                "lr": 0.01,
            },
        },
        # the paper's dim and mega-batch annealing, a 20k vocabulary, one epoch at a learning
        # rate that learns in one epoch (the paper's 0.001 needs its ~1M steps)
        Profile.demo: {
            "sentencepiece_model": {"vocab_size": 20_000},
            "psp_model": {"epochs": 1, "lr": 0.05},
            "model_evaluation": {"speed_repeats": 1},
            # the multilingual model keeps the paper's shared 50k vocabulary (the registry's)
            # and trains longer: every language's pairs, 5 epochs to stay within 15 minutes on
            # 2 cores (benchmarks/RESULTS.md#multi-model), the rate decaying linearly to 0: a
            # better dev mean at no cost in time (dropout 0.1 adds a little more,
            # benchmarks/RESULTS.md#train-variants, but trains much slower on a CPU,
            # benchmarks/RESULTS.md#train-speed)
            "multi_psp_model": {"epochs": 5, "lr": 0.05, "lr_decay": "linear"},
        },
        Profile.paper: {},
    }
)

#: what the job descriptions and the launchpad say each profile costs (whole language job, a
#: CPU, the shared data), in orders of magnitude; the measured costs:
#: benchmarks/RESULTS.md#profile-costs
PROFILE_COSTS = {
    Profile.smoke: "minutes at most, to check that every stage runs: a toy model (dim 32, "
    "vocabulary 500) whose scores mean nothing",
    Profile.demo: "minutes per language, a usable model: dim 1024, vocabulary 20,000, one epoch",
    Profile.paper: "the paper's settings (vocabulary 50,000, 25 epochs): minutes per language "
    "on the shared data, hours on millions of pairs: meant for a GPU",
}


def profile_summary() -> str:
    return "; ".join(f"{profile.value}: {cost}" for profile, cost in PROFILE_COSTS.items())


class ProfileResource(ConfigurableResource):
    """The run's profile (`PSP_PROFILE` sets the code location's default, else `paper`)."""

    name: Profile = Field(
        default=Profile.paper,
        description="smoke (checks that everything runs), demo (a usable model in minutes) or "
        "paper (the paper's settings). Fills the config fields a run leaves unset. Costs, "
        f"whole language job: {profile_summary()}.",
    )

    @property
    def label(self) -> str:
        """The profile's name as a user writes it (``demo``)."""
        return Profile(self.name).value

    def values(self, asset: str) -> dict[str, Any]:
        """What the profile sets of ``asset``'s config."""
        return dict(PROFILE_SETTINGS[Profile(self.name)].get(asset, {}))

    def settings(self, asset: str, explicit: dict[str, Any]) -> dict[str, Any]:
        """``asset``'s config values: the profile's, overridden by the run's ``explicit`` ones
        (fields left unset, i.e. None, are not explicit)."""
        chosen = dict(PROFILE_SETTINGS[Profile(self.name)].get(asset, {}))
        chosen.update({name: value for name, value in explicit.items() if value is not None})
        return chosen


def profile_from_environment(variable: str = "PSP_PROFILE") -> Profile:
    """The profile named by ``variable`` (smoke, demo or paper; default paper), with a clear
    error for anything else."""
    value = os.environ.get(variable, "").strip() or Profile.paper.value
    try:
        return Profile(value)
    except ValueError:
        choices = ", ".join(profile.value for profile in Profile)
        raise ValueError(
            f"{variable}={value!r} is not a profile; choose one of {choices}"
        ) from None


def retrain_run_config() -> dict[str, Any]:
    """Run config of the automatic retraining runs (the weekly schedule, the new-bitext
    sensor): ``PSP_RETRAIN_PROFILE``, default the paper's settings, whatever profile the code
    location's interactive runs default to (``PSP_PROFILE``)."""
    profile = profile_from_environment("PSP_RETRAIN_PROFILE")
    return {"resources": {"profile": {"config": {"name": profile.value}}}}


def retrain_profile_words() -> str:
    """The profile the automatic retraining runs use, as the UI says it (read when the code
    location loads)."""
    try:
        profile = profile_from_environment("PSP_RETRAIN_PROFILE").value
    except ValueError as error:
        profile = f"unreadable ({error})"
    return (
        f"the {profile} profile (PSP_RETRAIN_PROFILE; the paper's settings unless it says "
        "otherwise, whatever profile the launchpad defaults to)"
    )
