"""What an output path names, and so how it is written: the one place that decides.

:func:`resolve_output` looks at a path before anything is written to it:

* ``-`` is standard output (:data:`STANDARD_OUTPUT`), written into;
* a symbolic link is followed, through every link of the chain, and the output is its target:
  a file output replaces the target (a temporary beside the target, renamed over it) and a
  folder output the target folder, so the link is kept and points at the new output, as
  ``cp``, ``sort -o`` and ``tee`` write through a link;
* a character or block device, a FIFO, or an open descriptor (``/dev/stdout``, ``/dev/fd/N``:
  links into ``/proc/PID/fd``) is a :data:`STREAM`, written into in place: renaming a new file
  over ``/dev/null`` would replace the device node for everyone, and a FIFO's reader would
  wait forever;
* a regular file, or nothing yet, is a :data:`FILE`, replaced whole; an existing folder is a
  :data:`DIRECTORY`. A socket, or a chain of links that never ends, is refused.

The checks against overwriting inputs run on the resolved paths, so a link pointing at an input
is refused like the input itself.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from psp_core.files.stale_temps import remove_stale_temps_beside

#: a regular file or nothing yet: written beside the target under a temporary name, renamed over it
FILE = "file"
#: an existing folder: a folder output replaces it, a file output refuses it
DIRECTORY = "directory"
#: a device, a FIFO or an open descriptor: written into, in place
STREAM = "stream"
#: ``-``: the process's standard output, written into
STANDARD_OUTPUT = "standard output"

#: the folders whose entries are a process's open descriptors (``/dev/fd`` and ``/dev/stdout``
#: lead there): a link in one is a descriptor, not a path to replace
_DESCRIPTOR_FOLDER = re.compile(r"/proc/[^/]+/(?:task/[^/]+/)?fd")
#: as many links as Linux follows in one path before ELOOP
_MAX_LINKS = 40


class OutputError(Exception):
    """An output path that cannot be written: printed by the CLI as one line, exit code 2."""


@dataclass(frozen=True)
class OutputTarget:
    """An output path resolved: ``given`` as the user wrote it (what messages name), ``target``
    where the bytes go (every link followed; None for standard output), and ``kind``, one of
    :data:`FILE`, :data:`DIRECTORY`, :data:`STREAM` and :data:`STANDARD_OUTPUT`.

    It is path-like (``os.fspath`` gives ``given``), so a suffix or a log line reads the name the
    user chose."""

    given: str
    target: Path | None
    kind: str

    def __fspath__(self) -> str:
        return self.given

    def __str__(self) -> str:
        return self.given

    @property
    def streamed(self) -> bool:
        """Whether the output is written into in place (a device, FIFO, descriptor or standard
        output): no temporary, no rename, no space reserved, written front to back."""
        return self.kind in (STREAM, STANDARD_OUTPUT)

    @property
    def link(self) -> Path | None:
        """The given path, absolute, when it is a symbolic link followed to ``target``."""
        if self.kind == STANDARD_OUTPUT:
            return None
        given = Path(os.path.abspath(self.given))
        return given if os.path.islink(given) else None

    @property
    def shown(self) -> str:
        """How messages name the output: the given path, and the target a link led to."""
        if self.kind == STANDARD_OUTPUT:
            return "standard output"
        if self.link is not None and self.kind != STREAM:
            return f"{self.given} (a link to {self.target})"
        return self.given


def resolve_output(path: str | os.PathLike) -> OutputTarget:
    """What ``path`` names as an output, and how it is written (see the module's text).

    Raises :class:`OutputError` for a socket and for links that never end."""
    if isinstance(path, OutputTarget):
        return path
    given = os.fspath(path)
    if given == "-":
        return OutputTarget(given, None, STANDARD_OUTPUT)
    current = os.path.abspath(given)
    for _ in range(_MAX_LINKS):
        if not os.path.islink(current):
            break
        folder = os.path.realpath(os.path.dirname(current))
        if _DESCRIPTOR_FOLDER.fullmatch(folder):
            return OutputTarget(given, Path(given), STREAM)  # written into, as opened
        current = os.path.join(folder, os.readlink(current))  # (absolute links replace folder)
    else:
        raise OutputError(f"output {given}: {os.strerror(errno.ELOOP).lower()}")
    target = Path(os.path.realpath(current))  # the links among its folders
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return OutputTarget(given, target, FILE)  # not there yet (the parent is checked later)
    except OSError as error:
        raise OutputError(f"output {given}: {error.strerror.lower()}") from error
    if stat.S_ISSOCK(mode):
        raise OutputError(
            f"output {given} is a socket; psp writes files, folders, devices and FIFOs"
        )
    if stat.S_ISDIR(mode):
        return OutputTarget(given, target, DIRECTORY)
    return OutputTarget(given, target, FILE if stat.S_ISREG(mode) else STREAM)


def remove_stale_temps_of(output: OutputTarget) -> None:
    """Remove what killed writers of ``output`` left: beside its target, where its temporaries
    are made, and beside the link that names it, where writers that replaced the link left
    theirs."""
    if output.target is None or output.streamed:
        return
    remove_stale_temps_beside(output.target)
    if output.link is not None:
        remove_stale_temps_beside(output.link)
