"""The promotion gate: is a new model version at least as good as the promoted one on the dev
suite (:mod:`psp_core.evaluation.dev_suite`), within a tolerance?"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from psp_core.evaluation.dev_suite import is_lower_better


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    #: one line for the run's log and the UI
    reason: str
    candidate: dict[str, float]
    incumbent: dict[str, float] | None
    tolerance: float
    #: dev scores more than ``tolerance`` worse than the incumbent's
    worse: list[str] = field(default_factory=list)

    @property
    def decision(self) -> str:
        return "promoted" if self.promote else "not promoted"

    def to_dict(self) -> dict:
        return {**asdict(self), "decision": self.decision}


def worse_beyond(
    name: str,
    candidate: float,
    incumbent: float,
    tolerance: float,
    lower_is_better: Callable[[str], bool] = is_lower_better,
) -> bool:
    """Whether the candidate's score ``name`` is more than ``tolerance`` points worse."""
    if lower_is_better(name):
        return candidate > incumbent + tolerance
    return candidate < incumbent - tolerance


def decide(
    candidate: dict[str, float],
    incumbent: dict[str, float] | None,
    tolerance: float,
    lower_is_better: Callable[[str], bool] = is_lower_better,
) -> GateDecision:
    """Promote ``candidate`` (a version's dev scores) over ``incumbent`` (the promoted
    version's; None when there is none) unless a score both have is more than ``tolerance``
    points worse (lower; higher for an error rate). The first version is promoted; so is a
    version when neither has any dev score (no dev data: the gate cannot measure, and says
    so); a version that lacks the scores the incumbent has is not (it cannot be shown no
    worse). ``lower_is_better(name)`` says a score's direction; by default the dev suite's
    (:func:`psp_core.evaluation.dev_suite.is_lower_better`: from each suite's declaration)."""
    if incumbent is None:
        return GateDecision(True, "the first version of this model", candidate, None, tolerance)
    common = sorted(set(candidate) & set(incumbent))
    if not common:
        if not candidate and not incumbent:
            reason = "no dev scores on either version (no dev data): promoted unchecked"
            return GateDecision(True, reason, candidate, incumbent, tolerance)
        reason = (
            f"no dev score to compare (this version: {sorted(candidate) or 'none'}, the "
            f"promoted one: {sorted(incumbent) or 'none'})"
        )
        return GateDecision(False, reason, candidate, incumbent, tolerance)
    worse = [
        name
        for name in common
        if worse_beyond(name, candidate[name], incumbent[name], tolerance, lower_is_better)
    ]
    sides = ", ".join(f"{name} {candidate[name]:.2f} vs {incumbent[name]:.2f}" for name in common)
    if worse:
        reason = (
            f"worse than the promoted version beyond {tolerance} on {', '.join(worse)} ({sides})"
        )
        return GateDecision(False, reason, candidate, incumbent, tolerance, worse)
    reason = f"no dev score more than {tolerance} worse than the promoted version's ({sides})"
    return GateDecision(True, reason, candidate, incumbent, tolerance)
