"""Output directories (model bundles, exports, checkpoints, a command's work space): written under
a temporary name beside the target, then swapped into place, so that a reader, or a kill at any
instant, sees the old directory or the new one, whole, never a mix.

:func:`replace_directory` is the one way a directory is replaced. On Linux it exchanges the two
names in one system call (``renameat2(RENAME_EXCHANGE)``), then removes the old directory, now
under the temporary name. Where the file system cannot exchange names it moves the old
directory aside (``NAME.old-PID``), renames the new one in and removes the old; a kill between
the two renames leaves ``NAME`` missing, and the next run of any command writing ``NAME`` puts
the old directory back (:func:`psp_core.files.stale_temps.remove_stale_temps_beside`).

:func:`directory_written_then_replaced` wraps the whole sequence: the temporary directory is
created empty, filled by the caller, given the umask's modes (libraries such as safetensors
write through 0600 temporary files), swapped in; it is removed if anything fails, Ctrl-C and
SIGTERM included. A folder output that is a symbolic link is followed
(:func:`psp_core.files.output_targets.resolve_output`): its target folder is replaced, from a
temporary beside the target, and the link is kept.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from psp_core.files.new_folders import parents_made
from psp_core.files.output_targets import (
    OutputError,
    OutputTarget,
    remove_stale_temps_of,
    resolve_output,
)
from psp_core.files.stale_temps import remove_stale_temps_beside

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _load_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # glibc older than 2.28, or another C library
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    function.argtypes += [ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def exchange_names(first: str | Path, second: str | Path) -> bool:
    """Swap two existing paths' names atomically; False where this system cannot (then nothing
    changed). Other failures raise ``OSError``."""
    if _renameat2 is None:
        return False
    result = _renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def replace_directory(new: Path, final: Path) -> None:
    """Give the complete directory ``new`` the name ``final``, replacing what is there; a reader
    of ``final`` sees the old directory or the new one, never a mix or nothing (except on a file
    system that cannot exchange names, where a kill between two renames is repaired by the next
    run). ``new`` must be beside ``final`` (the same file system)."""
    if not os.path.lexists(final):
        os.rename(new, final)
    elif exchange_names(new, final):
        shutil.rmtree(new, ignore_errors=True)  # the old directory, now under the new's name
    else:
        old = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.rename(final, old)
        os.rename(new, final)
        shutil.rmtree(old, ignore_errors=True)


def current_umask() -> int:
    """The process's umask (read from /proc where it can be, since setting it to read it is not
    thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def umask_modes(directory: Path) -> None:
    """Give every file under ``directory`` the mode the umask gives a new file (0644 with the
    usual 022), and every folder the mode it gives a new folder, as ``open`` and ``mkdir`` do."""
    umask = current_umask()
    for root, folders, files in os.walk(directory):
        for name in folders:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & stat.S_IXUSR
                os.chmod(path, (0o777 if executable else 0o666) & ~umask)


def temporary_beside(final: Path) -> Path:
    """The temporary name of ``final`` for this process (``NAME.tmp-PID``)."""
    return final.with_name(f"{final.name}.tmp-{os.getpid()}")


def _fresh_temporary(output: OutputTarget, anchor: Path) -> Path:
    """The empty temporary beside ``anchor`` (``NAME.tmp-PID``), after removing (or putting
    back) what killed writers of ``output`` and of ``anchor`` left."""
    if not anchor.name:
        raise ValueError(f"{anchor} names no folder to write")
    anchor.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps_of(output)
    if anchor != output.target:
        remove_stale_temps_beside(anchor)
    tmp = temporary_beside(anchor)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def _folder_target(final: str | Path) -> OutputTarget:
    """``final`` resolved as a folder output: a link's target folder is replaced, the link kept."""
    output = resolve_output(final)
    if output.streamed:
        raise OutputError(f"{output.shown} is not a folder: a folder cannot be written into it")
    return output


@contextmanager
def directory_written_then_replaced(final: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``final``; when the block ends normally it
    takes the name ``final`` (:func:`replace_directory`), otherwise it is removed. Temporaries
    that killed writers of ``final`` left are removed (or put back) first.

    A ``final`` that is a symbolic link is followed: the temporary is made beside its target
    (the same file system) and replaces the target, and the link is kept."""
    output = _folder_target(final)
    with parents_made(output.target.parent):  # (taken back if the output fails)
        tmp = _fresh_temporary(output, output.target)
        try:
            yield tmp
            umask_modes(tmp)
            replace_directory(tmp, output.target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


#: what the scratch folder of an output that is written into (a device, FIFO, standard output)
#: is named after, in the system's temporary folder: it cannot be made beside such an output
STREAM_WORK = "psp-work"


@contextmanager
def work_directory_beside(output: str | Path | OutputTarget) -> Iterator[Path]:
    """A scratch directory beside ``output``'s target (``NAME.tmp-PID``), removed when the block
    ends; what killed runs left there is removed first. For an output written into (a device,
    a FIFO, standard output), whose folder may be /dev or /proc, it is ``psp-work.tmp-PID`` in
    the system's temporary folder (``$TMPDIR``) instead."""
    output = resolve_output(output)
    if output.streamed:
        anchor = Path(tempfile.gettempdir()).absolute() / STREAM_WORK
    else:
        anchor = output.target
    with parents_made(anchor.parent):  # (the output's folders: taken back if it fails)
        work = _fresh_temporary(output, anchor)
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)
