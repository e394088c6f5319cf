"""One merge of a training's settings, with where each value came from.

The layers, each over the one before: ``TrainConfig``'s defaults (the code) <- the registry's
``[defaults.training]`` (and the file it inherits them from) <- the language's
``[languages.X.training]`` (or ``[multi.training]``) <- the run's profile <- the run config <- the
compute resource (device, threads) <- the incremental retrain's adjustment. The retrain's
adjustment scales the learning rate the layers below the run config chose (the code's, the
registry's or the profile's) by the registry's ``[retrain] lr_scale``; a rate the run config
sets is taken as it is (docs/configuration.md, "Where a setting comes from").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from psp_core.training import TrainConfig

CODE_DEFAULT = "TrainConfig default"
RUN_CONFIG = "run config"
COMPUTE = "compute resource"


@dataclass(frozen=True)
class MergedSettings:
    """The training's settings and, for each, where its value was set."""

    config: TrainConfig
    origins: dict[str, str]

    def shown(self, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{name: {"value", "from"}}`` of ``names`` (default: every setting)."""
        values = asdict(self.config)
        return {
            name: {"value": values[name], "from": self.origins[name]}
            for name in (names if names is not None else values)
        }


def merge_training_settings(
    registry: Mapping[str, Any],
    registry_origins: Mapping[str, str],
    profile: tuple[str, Mapping[str, Any]],
    run_config: Mapping[str, Any],
    compute: Mapping[str, Any],
    lr_scale: float | None = None,
) -> MergedSettings:
    """The :class:`TrainConfig` of the layers above (``profile`` is ``(its name, its
    values)``; ``run_config`` holds only what the run set; ``lr_scale`` the incremental
    retrain's scale, None for a full training), and each value's origin."""
    values = asdict(TrainConfig())
    origins = dict.fromkeys(values, CODE_DEFAULT)
    layers = [
        (registry, lambda name: registry_origins.get(name, "the registry")),
        (profile[1], lambda name: f"profile {profile[0]}"),
        (run_config, lambda name: RUN_CONFIG),
        (compute, lambda name: COMPUTE),
    ]
    for layer, origin in layers:
        for name, value in layer.items():
            values[name] = value
            origins[name] = origin(name)
    if lr_scale is not None and "lr" not in run_config:
        values["lr"] = values["lr"] * lr_scale
        origins["lr"] = (
            f"{origins['lr']}, x {lr_scale} ([retrain] lr_scale: an incremental retrain)"
        )
    return MergedSettings(TrainConfig(**values), origins)
