"""``psp models list|promote|rollback``: a language's model versions and the promoted one
(:mod:`psp_core.models.registry`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from psp_core.models.registry import (
    NO_STORAGE_ROOT,
    STORAGE_ENV,
    STORAGE_ROOT_HELP,
    VERSIONS,
    ModelRegistry,
    RegistryError,
    Version,
    language_registry,
    last_decision,
    storage_root,
)


def add_models_parser(commands) -> None:
    models = commands.add_parser(
        "models", help="list a language's model versions, promote one, roll back"
    )
    actions = models.add_subparsers(dest="action", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "language",
        help="a language code (its registry under the storage root) or a registry folder",
    )
    where.add_argument(
        "--storage-root",
        help=STORAGE_ROOT_HELP,
    )
    listing = actions.add_parser("list", parents=[where], help="versions, scores, the promoted")
    listing.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    listing.set_defaults(handler=cmd_models_list)
    promote = actions.add_parser(
        "promote", parents=[where], help="promote a version (its bundle verified first)"
    )
    promote.add_argument("version", help="a version id (psp models list)")
    promote.add_argument("--reason", default="promoted by hand (psp models promote)")
    promote.set_defaults(handler=cmd_models_promote)
    rollback = actions.add_parser(
        "rollback",
        parents=[where],
        help="promote again the version promoted before this one (twice in a row: back to this "
        "one)",
    )
    rollback.add_argument("--reason", default="rolled back by hand (psp models rollback)")
    rollback.set_defaults(handler=cmd_models_rollback)


def open_registry(args: argparse.Namespace) -> ModelRegistry:
    """The registry a ``language`` argument names: a folder, or a language under the root."""
    given = Path(args.language)
    if "/" in args.language or given.is_dir():
        folder = given
    else:
        root = storage_root(args.storage_root)
        if root is None:
            raise RegistryError(
                f"{args.language!r}: give --storage-root or set {STORAGE_ENV}, or name a "
                f"registry folder ({NO_STORAGE_ROOT})"
            )
        folder = language_registry(root, args.language)
    if not (folder / VERSIONS).is_dir() and not (folder / "model").is_dir():
        raise RegistryError(f"{folder}: no model versions there (materialize psp_model first)")
    return ModelRegistry.open(folder)  # a model of an earlier release becomes the first version


def version_row(
    version: Version, promoted: Version | None, previous: Version | None, history: list[dict]
) -> dict:
    info = version.info
    decision = last_decision(history, version.id)
    return {
        "version": version.id,
        "promoted": promoted is not None and version.id == promoted.id,
        "rollback_target": previous is not None and version.id == previous.id,
        "created_at": info.get("created_at"),
        "dev_scores": version.dev_scores,
        "test_scores": version.test_scores,
        "decision": decision["action"] if decision else None,
        "bundle": str(version.bundle),
        # how it was trained (mode, parent...); None before versions recorded it
        "retrain": version.retrain,
    }


def cmd_models_list(args: argparse.Namespace) -> None:
    registry = open_registry(args)
    promoted, previous = registry.promoted(), registry.previous()
    history = registry.history()
    rows = [version_row(v, promoted, previous, history) for v in registry.versions()]
    if args.json:
        print(json.dumps({"registry": str(registry.root), "versions": rows}, indent=2))
        return
    dev = sorted({name for row in rows for name in row["dev_scores"]})
    test = sorted({name for row in rows for name in row["test_scores"]})
    header = ["", "version", "created", "mode", "parent"]
    header += [*(f"dev:{m}" for m in dev), *(f"test:{m}" for m in test)]
    lines = [header]
    for row in rows:
        mark = "*" if row["promoted"] else ("<" if row["rollback_target"] else "")
        scores = [_cell(row["dev_scores"].get(m)) for m in dev]
        scores += [_cell(row["test_scores"].get(m)) for m in test]
        lineage = _lineage(row["retrain"])
        lines.append([mark, row["version"], row["created_at"] or "", *lineage, *scores])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))
    print(
        "* promoted   < what psp models rollback brings back   mode: full (from scratch) or "
        "incremental (continued from parent)   dev: the gate's scores (development data)   "
        "test: the last evaluation's"
        if rows
        else "no versions"
    )


def cmd_models_promote(args: argparse.Namespace) -> None:
    """Promote a version whose bundle verifies (a damaged one: one line, exit 2, nothing
    changed); the version already promoted is left as it is, with its rollback target."""
    registry = open_registry(args)
    version, changed = registry.promote_decided(args.version, reason=args.reason)
    if not changed:
        previous = registry.previous()
        target = previous.id if previous is not None else "none"
        print(
            f"{version.id} is already the promoted version: nothing changed (rollback target: {target})"
        )
        return
    print(f"promoted {version.id}: {version.bundle}")


def cmd_models_rollback(args: argparse.Namespace) -> None:
    registry = open_registry(args)
    version = registry.rollback(reason=args.reason)
    print(f"rolled back to {version.id}: {version.bundle}")


def _lineage(retrain: dict | None) -> list[str]:
    """The mode and parent cells of a version (``-``: no parent; empty: not recorded)."""
    if not retrain:
        return ["", ""]
    return [str(retrain.get("mode", "")), retrain.get("parent") or "-"]


def _cell(value) -> str:
    return "" if value is None else f"{value:.2f}"
