"""Small file helpers shared by the CLI and the figure reproductions."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

__all__ = ["atomic_write", "atomic_write_json", "require_matplotlib"]


def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, then ``os.replace`` it onto ``path``.

    Readers see either the old file or the complete new one, never a partial write: the
    temporary file is fsynced before the rename, and the folder after it. The temporary file
    keeps ``path``'s extension (``savefig`` looks at it) and is removed if ``write`` raises.
    """
    d = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        write(tmp)
        # mkstemp makes 0600 files; keep the old file's mode, or use rw-r--r-- for a new one
        mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o644
        os.chmod(tmp, mode)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(d)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as indented JSON (no NaN/inf allowed) atomically."""
    text = json.dumps(obj, indent=2, allow_nan=False, sort_keys=False) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)


def require_matplotlib(who: str) -> None:
    """Raise a clear ``ImportError`` before any work if matplotlib (the ``plot`` extra) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(f"{who} needs matplotlib: pip install 'lpjax[plot]'") from None
