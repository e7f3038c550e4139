"""Ctrl-C and SIGTERM in the command line: a run into a store stops at the next chunk with its
finished chunks kept, and the command says how to resume it."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading


@contextlib.contextmanager
def _interrupts():
    """Ctrl-C and SIGTERM during a run: the first stops it once the chunks running are written
    (``KeyboardInterrupt``, which :func:`main` turns into exit status 130 and the command that
    resumes); a second ends the process at once (what the chunks running had done is lost)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []

    def handler(signum, frame):
        seen.append(signum)
        if len(seen) > 1:
            print("lpjax: interrupted twice: stopped at once, without the chunks that were running", file=sys.stderr,
                  flush=True)
            os._exit(130)
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield  # after an interrupt the handler stays: the process is on its way out, joining its threads
    for sig, h in before.items():
        signal.signal(sig, h)


def _resume_hint(argv: list) -> str:
    """For an interrupted ``lpjax ensemble --out STORE``: where its finished chunks are, and the
    command that finishes the run."""
    if not argv or argv[0] != "ensemble" or "--out" not in argv or "LPJAX_PROCESS_ID" in os.environ:
        return ""  # (a process of `lpjax ensemble --processes K`: the launcher says it)
    store = argv[argv.index("--out") + 1] if argv.index("--out") + 1 < len(argv) else "the store"
    again = argv if "--resume" in argv else [*argv, "--resume"]
    return f"; the finished chunks are in {store}; resume with: lpjax {shlex.join(again)}"
