"""Ctrl-C stops an ensemble at the next chunk boundary with its store resumable, from Python
(``KeyboardInterrupt``) and from the command line (exit status 130 and the command that
resumes); the resumed run equals an uninterrupted one bit for bit. Before: the run went on to its
end (Python), or was lost (the command line: 0 of 1 chunks)."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import lpjax
from lpjax.cli import main
from lpjax.systems import heavy_top

pytest.importorskip("llvmlite")  # the default kernel on CPU, as users run it

ARGS = ["heavy_top", "--n", "1024", "--method", "gl4", "--steps", "24000", "--dt", "0.01"]


def _interrupt(script: str, after: float, store, pick=lambda p: p.pid) -> tuple:
    """Run ``script`` in a child Python; SIGINT to ``pick(child)`` (the child itself, by default)
    ``after`` seconds once it prints "started" (or, on a loaded machine, once ``store`` has a
    finished chunk); ``(status, seconds from the signal to the exit, stderr)``."""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "started" not in p.stderr.readline():
        assert p.poll() is None, p.stderr.read()
    time.sleep(after)
    for _ in range(600):
        try:
            if _done(store).any():
                break
        except Exception:  # not created yet
            pass
        time.sleep(0.1)
    t = time.perf_counter()
    os.kill(pick(p), signal.SIGINT)
    _, err = p.communicate(timeout=120)
    return p.returncode, time.perf_counter() - t, err


def _first_process(p) -> int:
    """The first process that the launcher ``p`` started (Linux: /proc)."""
    return int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])


def _done(store) -> np.ndarray:
    return np.asarray(zarr.open_group(str(store), mode="r")["chunk_done"])


def _timed(call) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def test_ctrl_c_from_the_command_line_exits_130_and_its_resume_command_finishes_bit_for_bit(tmp_path):
    whole_s = _timed(lambda: main(["ensemble", *ARGS, "--out", str(tmp_path / "whole.zarr")]))
    script = textwrap.dedent(f"""
        import sys
        from lpjax.cli import main
        print("started", file=sys.stderr, flush=True)
        main({["ensemble", *ARGS, "--out", str(tmp_path / "cut.zarr")]!r})
    """)
    status, stopped_in, err = _interrupt(script, 0.4 * whole_s, tmp_path / "cut.zarr")
    assert status == 130, err
    assert stopped_in <= max(0.25 * whole_s, 5.0), (stopped_in, whole_s)
    done = _done(tmp_path / "cut.zarr")
    assert 1 <= done.sum() < done.size, done  # the finished chunks kept, the run not finished
    main(re.search(r"resume with: lpjax (.*)", err).group(1).split())
    assert _done(tmp_path / "cut.zarr").all()
    a, b = (lpjax.open_ensemble(str(tmp_path / n)) for n in ("whole.zarr", "cut.zarr"))
    np.testing.assert_array_equal(np.asarray(a.final_state), np.asarray(b.final_state))


def test_ctrl_c_from_python_raises_keyboard_interrupt_with_the_store_resumable(tmp_path):
    top = "heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)"
    y0s = "0.3 * np.random.default_rng(0).normal(size=(1024, 6)) + np.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])"
    run = f"lpjax.ensemble({top}, lpjax.GaussLegendre(2), {y0s}, 0.01, 40000, out={{out!r}}, resume={{resume}})"
    env = {"lpjax": lpjax, "heavy_top": heavy_top, "jnp": jnp, "np": np}
    whole_s = _timed(lambda: eval(run.format(out=str(tmp_path / "whole.zarr"), resume=False), env))
    script = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import jax; jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp, numpy as np, lpjax
        from lpjax.systems import heavy_top
        print("started", file=sys.stderr, flush=True)
        try:
            {run.format(out=str(tmp_path / "cut.zarr"), resume=False)}
        except KeyboardInterrupt:
            sys.exit(3)
    """)
    status, stopped_in, err = _interrupt(script, 0.4 * whole_s, tmp_path / "cut.zarr")
    assert status == 3, err  # KeyboardInterrupt reached the caller
    assert stopped_in <= max(0.25 * whole_s, 5.0), (stopped_in, whole_s)
    done = _done(tmp_path / "cut.zarr")
    assert 1 <= done.sum() < done.size, done
    b = eval(run.format(out=str(tmp_path / "cut.zarr"), resume=True), env)
    a = lpjax.open_ensemble(str(tmp_path / "whole.zarr"))
    np.testing.assert_array_equal(np.asarray(a.final_state), np.asarray(b.final_state))


def test_the_progress_bar_counts_chunks_and_shows_members_per_second(tmp_path, capsys):
    system = lpjax.systems.rigid_body(jnp.array([1.0, 2.0, 3.0]))
    y0s = np.random.default_rng(0).normal(size=(1024, 3))
    lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, 0.01, 200, out=str(tmp_path / "s.zarr"), progress=True)
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert re.search(r"8/8 \[.*chunk/s, 1024 members x 200 steps, [0-9.e+]+ members/s\]", last), last


@pytest.mark.parametrize("target", ["launcher", "one process"])
def test_ctrl_c_to_two_processes_stops_both_at_chunk_boundaries_and_one_process_resumes(tmp_path, target):
    """``lpjax ensemble --processes 2``: Ctrl-C at a terminal reaches the launcher alone (its
    processes run in their own sessions); it passes the signal on, each process stops at its next
    chunk boundary, and the launcher exits 130 with the command that resumes. A SIGINT to one of
    the processes alone stops the other the same way. Resumed on one process, the store equals a
    one-process run's to roundoff (the two runs' chunks differ)."""
    if target == "one process" and not os.path.exists("/proc/self/task"):
        pytest.skip("finds the launcher's processes in /proc")
    args = ["heavy_top", "--n", "1024", "--method", "gl4", "--steps", "20000", "--dt", "0.01", "--no-progress"]
    whole_s = _timed(lambda: main(["ensemble", *args, "--out", str(tmp_path / "whole.zarr")]))
    script = textwrap.dedent(f"""
        import sys
        from lpjax.cli import main
        print("started", file=sys.stderr, flush=True)
        main({["ensemble", *args, "--processes", "2", "--out", str(tmp_path / "cut.zarr")]!r})
    """)
    status, stopped_in, err = _interrupt(script, 0.4 * whole_s, tmp_path / "cut.zarr",
                                         _first_process if target == "one process" else (lambda p: p.pid))
    assert status == 130, err
    assert stopped_in <= max(0.25 * whole_s, 5.0), (stopped_in, whole_s)
    done = _done(tmp_path / "cut.zarr")
    assert 1 <= done.sum() < done.size, done
    again = re.search(r"resume with: lpjax (.*)", err).group(1).split()
    assert again[again.index("--processes") + 1] == "2" and again[-1] == "--resume"
    one = [a for i, a in enumerate(again) if "--processes" not in again[max(0, i - 1):i + 1]]
    main(one)  # on one process
    a, b = (lpjax.open_ensemble(str(tmp_path / n)) for n in ("whole.zarr", "cut.zarr"))
    assert b.settings["finished"]["processes"] == 1
    np.testing.assert_allclose(np.asarray(b.final_state), np.asarray(a.final_state), rtol=0, atol=1e-12)


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """The first Ctrl-C waits for the chunks running; a second ends the command at once, with
    status 130, the chunks marked done before it kept and the store not marked finished."""
    store = tmp_path / "cut.zarr"
    script = textwrap.dedent(f"""
        import sys
        from lpjax.cli import main
        print("started", file=sys.stderr, flush=True)
        main({["ensemble", *ARGS, "--no-progress", "--out", str(store)]!r})
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "started" not in p.stderr.readline():
        assert p.poll() is None, p.stderr.read()
    for _ in range(1200):  # a chunk done: the run is under way, with chunks running
        try:
            if _done(store).any():
                break
        except Exception:
            pass
        time.sleep(0.05)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)  # the first handled (two at once are one pending signal), the chunks still running
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    stopped_in = time.perf_counter() - t
    assert p.returncode == 130 and "interrupted twice: stopped at once" in err, err
    done = _done(store)
    assert 1 <= done.sum() < done.size and "finished" not in zarr.open_group(str(store), mode="r").attrs
    assert stopped_in < 1.0, stopped_in  # os._exit: the chunks running (about 2 s each here) not waited for
