"""Every file the project writes passes here: the one check against the installed package (`check_output_path`:
nothing inside it unless `spot build ... --overwrite-shipped` asked) and atomic writes (a temporary file moved into
place), plus the read check that tells an unreadable file from a missing one. No torch: the tokenizer and the
offline pipeline's text steps write through it too."""

from __future__ import annotations

import contextlib
import contextvars
import glob
import os
import stat
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent  # the installed `spot` package: shipped weights and assets


# Whether writes inside the installed package are allowed: set only around a `spot build` step given
# --overwrite-shipped (`overwriting_shipped`). A context variable rather than an argument of every writer, so that
# no writer (weights, checkpoints, trajectories, budgets, prompts, corpus, bench JSON) can forget the check.
_SHIPPED_WRITES = contextvars.ContextVar("spot_shipped_writes", default=False)


@contextlib.contextmanager
def overwriting_shipped(allowed: bool = True):
    """Within this block, `check_output_path` lets writes into the installed package through (`allowed`)."""
    token = _SHIPPED_WRITES.set(bool(allowed))
    try:
        yield
    finally:
        _SHIPPED_WRITES.reset(token)


def check_output_path(path) -> Path:
    """`path`, refused (ValueError) when it lies inside the installed spot package, unless within
    `overwriting_shipped()` (`spot build ... --overwrite-shipped`). Every write of the project passes here."""
    path = Path(path)
    resolved = path.resolve()
    if (resolved == PACKAGE_DIR or PACKAGE_DIR in resolved.parents) and not _SHIPPED_WRITES.get():
        raise ValueError(f"{path} is inside the installed spot package ({PACKAGE_DIR}: shipped weights and "
                         "assets); write elsewhere, or pass --overwrite-shipped to `spot build` to replace them")
    return path


def atomic_write(path, write) -> None:
    """Call `write(temp_path)` on a temporary file beside `path`, then move it over `path` (`os.replace`): an
    interrupted write leaves the old `path` intact (and no temporary file behind). `path` must pass
    `check_output_path`."""
    path = check_output_path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _new_file_mode())  # mkstemp's files are private (0600); a written result should not be
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _new_file_mode() -> int:
    """The mode `open` gives a new file: 0666 less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def remove_stale_temporaries(path) -> list[Path]:
    """Delete the temporary files `atomic_write` left beside `path` when a process was killed mid-write (SIGKILL
    runs no cleanup): `.{name}.*.tmp`. Call it only where no other process writes `path`. Returns what it removed."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp")) if path.parent.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def check_readable_file(path) -> None:
    """FileNotFoundError when `path` does not exist; ValueError naming it when it exists but is no regular file or
    cannot be read (an unreadable file is not a missing one)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{path}: cannot read it (permission denied)")
