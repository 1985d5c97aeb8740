"""Files written whole or not at all: a temporary file beside the target, fsynced, then renamed over it.

A crash, a full disk or a kill at any moment leaves either the old file or the new one, never a cut
one. Inside a run folder the rename replaces a symbolic link at the target instead of writing
through it, so a link planted there cannot redirect a write elsewhere; an output the user named
(`-o`, `--markdown`, a card) may follow its link (`follow_links`). A target that exists and is not
a regular file (/dev/stdout, a pipe) is written in place: there is nothing to replace. A file
appended in place (a journal, a log) is opened with `open_plain`, which refuses a link; a folder
replaced whole (a baseline) is swapped with `exchange`, and one written whole beside its place (a merged
run) is renamed there with `rename_new`, each in one step where the system can.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from suite.errors import UsageError


@contextmanager
def replacing(target: Path):
    """Yield a temporary path beside `target` for a writer that wants a path (Parquet, CSV, HTML);
    when the block ends without an error, the file is fsynced and renamed over `target`. On an
    error the temporary file is removed and `target` is untouched."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # NB: mkstemp's 0600 would make results unreadable to others
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_dir(target.parent)


def write_bytes(target: Path, data: bytes, follow_links: bool = False) -> Path:
    """`data` as the whole content of `target`, atomically; returns `target` as given."""
    path = Path(target)
    if _in_place(path):
        with open(path, "wb") as fh:
            fh.write(data)
        return path
    with replacing(path.resolve() if follow_links and path.is_symlink() else path) as tmp:
        write_all(tmp, data)
    return path


def write_text(target: Path, text: str, follow_links: bool = False) -> Path:
    return write_bytes(target, text.encode(), follow_links)


def _in_place(path: Path) -> bool:
    """A device, a pipe, or a name for one (/dev/stdout is a link to the process's own descriptor,
    whatever it is): never replaced, written as it is."""
    if path.exists() and not path.is_file():
        return True
    return any(str(p).startswith(("/dev/", "/proc/")) for p in (path.absolute(), Path(os.path.realpath(path))))


def write_all(path: Path, data: bytes) -> None:
    """Every byte of `data` into `path` (os.write may write fewer than asked: it is called again)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"no progress writing {path}")
            view = view[written:]
    finally:
        os.close(fd)


def check_target(field: str, target, parents: bool = False) -> Path:
    """A file the user named for an output (`--markdown`, `-o`, $GITHUB_STEP_SUMMARY), checked before any
    work: not empty, not a folder, in a folder that can be written (`parents`: or below the nearest
    existing folder, where the missing ones are made). UsageError naming the field, the value and what is
    allowed; a device or a pipe passes as it is (written in place)."""
    allowed = "a file in a folder this user can write"
    if not str(target or "").strip():
        raise UsageError(f"{field} {target!r} (allowed: {allowed})")
    path = Path(target)
    if path.is_dir():
        raise UsageError(f"{field} {str(path)!r} is a folder (allowed: {allowed})")
    if _in_place(path):
        return path
    return _writable(field, path, path.absolute().parent, parents, allowed)  # NB: replaced by a rename: the
    # file's own mode does not matter, its folder's does


def check_folder(field: str, folder) -> Path:
    """A folder the user named for outputs (`--reports-dir`, `--into`): one that can be written, or that
    can be made below the nearest existing one. UsageError naming the field, the value and what is allowed."""
    allowed = "a folder this user can write, or one that can be made"
    if not str(folder or "").strip():
        raise UsageError(f"{field} {folder!r} (allowed: {allowed})")
    return _writable(field, Path(folder), Path(folder).absolute(), True, allowed)


def _writable(field: str, given: Path, folder: Path, parents: bool, allowed: str) -> Path:
    while parents and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(
            f"{field} {str(given)!r}: {folder} is {'not a folder' if folder.exists() else 'missing'} "
            f"(allowed: {allowed})"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{field} {str(given)!r}: {folder} cannot be written by this user (allowed: {allowed})")
    return given


def check_outputs(files: dict[str, object], folders: dict[str, object] | None = None, summary: bool = False) -> None:
    """Every output a command was given, by its option's name (None: not given), checked before any work;
    `summary`: $GITHUB_STEP_SUMMARY too."""
    for field, value in files.items():
        if value is not None:
            check_target(field, value)
    for field, value in (folders or {}).items():
        if value is not None:
            check_folder(field, value)
    if summary:
        check_summary()


def check_summary() -> None:
    """$GITHUB_STEP_SUMMARY, where it is set, checked as an output before any work."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and Path(summary).is_file():  # NB: appended to: the file's mode matters, not its folder's
        if not os.access(summary, os.W_OK):
            raise UsageError(
                f"$GITHUB_STEP_SUMMARY {summary!r} cannot be written by this user (allowed: a file it can append to)"
            )
    elif summary:
        check_target("$GITHUB_STEP_SUMMARY", summary)


def link_refused(path: Path) -> UsageError:
    return UsageError(f"{path} is a symbolic link: a run folder holds plain files only (replace the link by the file)")


def open_plain(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open that never follows a symbolic link at `path` (O_NOFOLLOW): a link is a UsageError naming it."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError as err:
        if err.errno == errno.ELOOP:  # NB: what O_NOFOLLOW answers for a link
            raise link_refused(path) from None
        raise


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 with RENAME_EXCHANGE): at no moment is either name
    missing. False where the system cannot (not Linux, an old kernel or C library, a file system without it)."""
    return _renameat2(a, b, 2)


def rename_new(source: Path, target: Path) -> None:
    """Rename `source` (a file or a folder) to `target`, which must not exist: FileExistsError where it
    does. In one step where the system can (renameat2 with RENAME_NOREPLACE); elsewhere the name is
    checked first, and a folder's rename still refuses a target folder that is not empty."""
    if not _renameat2(source, target, 1):
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
        os.rename(source, target)


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """Linux renameat2(a, b, flags): True where done, False where the system cannot; OSError otherwise."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def sync_dir(directory: Path) -> None:
    """fsync a folder, so that a rename in it is on disk too (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
