"""Temporary files that a killed process left behind, found by the pid in their name and removed.

Every writer in the project writes beside its target under a name that ends in its own pid, and
renames (or, on an exception, removes) it when done:

* ``.{name}.tmp-{pid}``: pair files (:class:`ops.pairs.pair_files.PairWriter`),
  :func:`ops.sources.text_io.atomic_path`, a stage's manifest;
* ``{name}.tmp-{pid}``: training files, checkpoints, model bundle directories;
* ``{name}.old-{pid}``: a directory being replaced where the file system cannot exchange two
  names at once (:func:`psp_core.files.output_dirs.replace_directory`).

An output that is a symbolic link has its temporaries beside the link's target, where they are
renamed (:func:`psp_core.files.output_targets.resolve_output`); the scratch folder of an output
written into in place (a device, a FIFO, standard output) is ``psp-work.tmp-{pid}`` in the
system's temporary folder.

Only a process killed outright (``kill -9``, the OOM killer) leaves one behind, and nothing
reads it again: :func:`remove_stale_temps` removes those whose pid no longer runs, and
:func:`remove_stale_temps_beside` those of one output. One is not removed but put back: a
``{name}.old-{pid}`` whose ``{name}`` is missing is the old output of a replacement killed
between its two renames, and it takes its name again (the old output, whole). Download
partials (``{name}.part`` in the cache) are not temporaries: a later download resumes them.

Two limits, both accepted: a pid may have been reused by an unrelated process, which keeps the
stale file until that process ends; and a pid means something only on the machine that wrote it,
so on a storage root shared between machines a directory must not be cleaned while another
machine writes into it (for a stage, that would mean running the same stage of the same
language on two machines at once, which is unsafe anyway).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

_TEMP_SUFFIX = re.compile(r".\.(?:tmp|old)-([0-9]+)\Z")
_MAX_PID = 2**22  # Linux's PID_MAX_LIMIT


def _temporary_of(name: str) -> tuple[str, int] | None:
    """``(name it stands for, writer's pid)`` of a temporary's name (``.pairs.parquet.tmp-4242``
    -> ``(".pairs.parquet", 4242)``), else None."""
    match = _TEMP_SUFFIX.search(name)
    pid = int(match.group(1)) if match else 0
    return (name[: match.start() + 1], pid) if 0 < pid <= _MAX_PID else None


def writer_pid(name: str) -> int | None:
    """The pid a temporary name ends in (``.pairs.parquet.tmp-4242`` -> 4242), else None."""
    temporary = _temporary_of(name)
    return temporary[1] if temporary else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (zombies included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def _remove_or_restore(entry: os.DirEntry, pid: int) -> Path | None:
    """Remove a dead writer's temporary (or put an interrupted replacement's old output back);
    returns the path removed, None when nothing was removed."""
    path = Path(entry.path)
    if entry.name.endswith(f".old-{pid}"):
        original = path.with_name(entry.name[: -len(f".old-{pid}")])
        if not os.path.lexists(original):
            os.rename(path, original)
            log.warning("restored %s: its replacement by pid %d was cut off", original, pid)
            return None
    try:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return None  # gone meanwhile
    log.info("removed %s: left by pid %d, which no longer runs", path, pid)
    return path


def remove_stale_temps_beside(output: str | Path) -> list[Path]:
    """Remove the temporaries dead writers of ``output`` left beside it (``.NAME.tmp-PID``,
    ``NAME.tmp-PID``, ``NAME.old-PID`` in its folder, and nothing else); returns them."""
    output = Path(os.path.abspath(output))
    removed: list[Path] = []
    try:
        entries = list(os.scandir(output.parent))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        temporary = _temporary_of(entry.name)
        if temporary is None or temporary[0] not in (output.name, f".{output.name}"):
            continue
        if not pid_alive(temporary[1]) and (path := _remove_or_restore(entry, temporary[1])):
            removed.append(path)
    return removed


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the temporaries under ``directory`` whose writer's pid no longer runs.

    Files and whole directories named as above are removed; the temporaries of live processes
    and every other file are kept (a live writer's directory is not looked into). Symbolic links
    are not followed. Returns the removed paths.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        pid = writer_pid(entry.name)
        if pid is None:
            if entry.is_dir(follow_symlinks=False):
                removed += remove_stale_temps(entry.path)
            continue
        if not pid_alive(pid) and (path := _remove_or_restore(entry, pid)):
            removed.append(path)
    return removed
