"""Every file the project writes or reads from a user's path passes here (docs/design.md §7, "Bad input").

Writing, one output-path rule (`check_output_path`): the path, a symlink resolved, lies outside the installed package
(unless `spot build ... --overwrite-shipped` asked) and is absent, a regular file or a folder, never a device node,
FIFO or socket; a file written in place (`check_output_file`, `atomic_write`: a temporary file moved into place) is
absent or a regular file, in a folder that exists; `check_writable` also proves the folder writable, before a run.
Reading, one input-file rule (`read_input_bytes`, `read_input_text`, `read_json`): a regular file under a size cap,
opened without blocking (a FIFO with no writer is refused, never waited on), its kind checked on the open
descriptor. No torch: the tokenizer and the offline pipeline's text steps write through it too."""

from __future__ import annotations

import contextlib
import contextvars
import glob
import json
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
    """`path`, refused (ValueError naming it) when it lies inside the installed spot package (unless within
    `overwriting_shipped()`: `spot build ... --overwrite-shipped`), or when what is there, a symlink resolved, is
    neither a regular file nor a folder (a device node, FIFO or socket: a write would replace or block on it).
    Every write of the project passes here."""
    path = Path(path)
    resolved = _resolved(path)
    if (resolved == PACKAGE_DIR or PACKAGE_DIR in resolved.parents) and not _SHIPPED_WRITES.get():
        raise ValueError(f"{path} is inside the installed spot package ({PACKAGE_DIR}: shipped weights and "
                         "assets); write elsewhere, or pass --overwrite-shipped to `spot build` to replace them")
    kind = _kind(resolved)
    if kind not in (None, "regular file", "folder"):
        raise ValueError(f"{path}: {_is(path, resolved)} a {kind}, not a regular file or a folder; spot writes only "
                         "those (it would replace or block on anything else)")
    return path


def check_output_file(path) -> Path:
    """The path a file is written at (a symlink resolved: the link is kept, its target replaced), refused (ValueError
    naming `path`) unless `check_output_path` passes and it is absent or a regular file in a folder that exists."""
    path = check_output_path(path)
    resolved = _resolved(path)
    if _kind(resolved) == "folder":
        raise ValueError(f"{path}: {_is(path, resolved)} a folder, not a file")
    if not resolved.parent.is_dir():
        raise ValueError(f"{path}: folder {resolved.parent} does not exist")
    return resolved


def check_writable(path) -> None:
    """`check_output_file`, and proof that a file can be written there: checked before a run, so that a bad
    --json does not lose the results of a whole benchmark. Leaves nothing behind."""
    resolved = check_output_file(path)
    if resolved.exists() and not os.access(resolved, os.W_OK):
        raise ValueError(f"{path}: not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=resolved.parent, prefix=f".{resolved.name}.", suffix=".tmp"):
            pass
    except OSError as e:
        raise ValueError(f"{path}: cannot write in {resolved.parent} ({e.strerror or e})") from None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise ValueError(f"{path}: cannot resolve it ({getattr(e, 'strerror', None) or e})") from None


_KINDS = ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _kind_of_mode(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def path_kind(path) -> str | None:
    """What is at `path`, a symlink resolved: "regular file", "folder", "FIFO", "character device", "block device",
    "socket"; None when nothing is (a dangling symlink too)."""
    return _kind(_resolved(Path(path)))


def _kind(resolved: Path) -> str | None:
    try:
        return _kind_of_mode(os.stat(resolved).st_mode)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"{resolved}: cannot look at it ({e.strerror or e})") from None


def _is(path: Path, resolved: Path) -> str:
    return f"links to {resolved}, which is" if path.is_symlink() else "is"


def atomic_write(path, write) -> None:
    """Call `write(temp_path)` on a temporary file beside `path`, then move it over `path` (`os.replace`): an
    interrupted write leaves the old `path` intact (and no temporary file behind). `path` must pass
    `check_output_file` (a symlink is resolved: the link stays, its target is replaced)."""
    path = check_output_file(path)
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
        raise ValueError(f"{path}: not a regular file (a {_kind_of_mode(mode)})")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{path}: cannot read it (permission denied)")


# A file read whole (prompts, reports, configs, indexes) is read up to this many MB: a larger one is refused, named.
INPUT_LIMIT_MB = 64


def read_input_bytes(path, limit_mb: float = INPUT_LIMIT_MB) -> bytes:
    """The bytes of the regular file `path`, at most `limit_mb` MB (decimal). FileNotFoundError when it is missing;
    ValueError naming it when it is no regular file (a folder, FIFO, device node, socket), unreadable or larger.
    Opened without blocking (O_NONBLOCK: a FIFO with no writer is not waited on) and checked on the open
    descriptor, so nothing swapped in after the first look is read either."""
    path = Path(path)
    check_readable_file(path)  # refuses a device node before opening it (opening some has effects)
    limit = int(limit_mb * 1e6)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path}: not a regular file (a {_kind_of_mode(info.st_mode)})")
        if info.st_size > limit:
            raise ValueError(f"{path}: {info.st_size / 1e6:.3g} MB, larger than the {limit_mb:g} MB spot reads")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise ValueError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:  # it grew while read
        raise ValueError(f"{path}: larger than the {limit_mb:g} MB spot reads")
    return data


def read_input_text(path, limit_mb: float = INPUT_LIMIT_MB) -> str:
    """`read_input_bytes` decoded as UTF-8 (an error names the file and the byte)."""
    data = read_input_bytes(path, limit_mb)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{Path(path)}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def read_json(path, kind: type | None = dict, limit_mb: float = INPUT_LIMIT_MB):
    """The JSON value of the file `path` (`read_input_text`), of type `kind` (default a JSON object; None: any).
    Errors name the file: not JSON, nested too deeply, or another type."""
    text = read_input_text(path, limit_mb)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{Path(path)}: not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{Path(path)}: not JSON spot reads (nested too deeply)") from None
    if kind is not None and not isinstance(value, kind):
        expected = "a JSON object" if kind is dict else f"JSON {kind.__name__}"
        raise ValueError(f"{Path(path)}: expected {expected}, got {_json_type(value)}")
    return value


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)
