"""One ensemble over several processes (jax.distributed, two local processes with gloo
collectives): the store they write is the store of one process bit for bit; a process killed
mid-run is resumed on one or two processes to the same bits, leaving the chunks written before
the kill untouched; other settings are refused; ``lpjax ensemble --processes 2``."""

import json
import os
import shutil
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import lpjax
from lpjax._ensemble._processes import launch_local, share
from lpjax.cli import main
from lpjax.systems import rigid_body

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
Y0 = np.random.default_rng(3).normal(size=(1000, 3))
Y0[7] = np.nan  # a failed member: its code is part of the store
METHODS = {"mv": lpjax.MoserVeselov(), "gl4": lpjax.GaussLegendre(2)}
KILLED = dict(n_steps=400, chunk_size=50)  # 20 chunks, 10 a process


def run(method: str, out, y0s=Y0, n_steps=40, dt=0.05, chunk_size=100, **kw):
    return lpjax.ensemble(RB, METHODS[method], y0s, dt, n_steps, save_every=10, observe="casimirs", out=out,
                          chunk_size=chunk_size, metadata={"seed": 3}, stats=True, **kw)


def arrays(path) -> dict:
    """Every array of a store, by its path."""
    out = {}

    def walk(group, prefix):
        for name, node in group.members():
            if isinstance(node, zarr.Group):
                walk(node, f"{prefix}{name}/")
            else:
                out[prefix + name] = np.asarray(node[...])

    walk(zarr.open_group(str(path), mode="r"), "")
    return out


def assert_same_store(a, b) -> None:
    x, y = arrays(a), arrays(b)
    assert sorted(x) == sorted(y)
    for name in x:
        assert x[name].dtype == y[name].dtype and np.array_equal(x[name], y[name], equal_nan=True), name


# Each child joins the run (before JAX starts), then imports this module and does its part.
_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    from lpjax._ensemble._processes import initialize
    initialize()
    sys.path.insert(0, {tests!r})
    import numpy as np
    import test_processes as T
    me, where, what = jax.process_index(), sys.argv[1], sys.argv[2]
    said = {{}}

    def refused(name, **kw):  # every process must raise the same ValueError
        try:
            T.run("mv", **kw)
        except ValueError as e:
            said[name] = str(e)

    if what == "fresh":
        refused("other y0s", out=os.path.join(where, "never"), y0s=T.Y0 * (1 + me))
        refused("devices", out=None, devices=jax.devices())
        for m in T.METHODS:
            T.run(m, os.path.join(where, m))
        T.run("mv", os.path.join(where, "moments"), reduce="moments")
        own = T.run("mv", None)
        np.savez(os.path.join(where, f"own{{me}}.npz"), final_state=own.final_state, result=own.result,
                 first=own.first_member, y0s=own.y0s)
    elif what == "kill":
        from lpjax._ensemble._store import Store
        marks, mark_done = [], Store.mark_done

        def kill_at_the_third(self, k):  # process 1, at its third chunk: written, not marked
            marks.append(k)
            if me == 1 and len(marks) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            mark_done(self, k)

        Store.mark_done = kill_at_the_third
        T.run("mv", where, **T.KILLED)
    elif what == "resume":
        refused("other dt", out=where, resume=True, dt=0.04, n_steps=400)
        T.run("mv", where, resume=True, n_steps=400, chunk_size=None)
    with open(os.path.join(os.path.dirname(where) if what != "fresh" else where, f"said{{me}}.json"), "w") as f:
        json.dump(said, f)
""").format(tests=os.path.dirname(os.path.abspath(__file__)))


def launch(where, what: str) -> int:
    return launch_local(2, ["-c", _CHILD, str(where), what], timeout=240)


def test_the_share_of_each_process_is_contiguous_and_covers_the_chunks():
    for n in (0, 1, 7, 20):
        for count in (1, 2, 3, 8):
            parts = [list(range(n))[share(n, count, i)] for i in range(count)]
            assert sum(parts, []) == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_two_processes_write_the_store_of_one_bit_for_bit(tmp_path):
    """Moser-Veselov and GL4, 10 chunks: 5 a process, the member with a NaN state included.
    Other initial states on one process, or another process's devices, are refused on both.
    Without a store each process returns its own members. ``reduce="moments"``: the chunks'
    moments are those of one process, bit for bit, and their combination is the mean and sample
    variance of the stored observables of the members that did not fail (1e-12)."""
    assert launch(tmp_path, "fresh") == 0
    run("mv", str(tmp_path / "moments-one"), reduce="moments")
    assert_same_store(tmp_path / "moments", tmp_path / "moments-one")
    stored, reduced = lpjax.open_ensemble(str(tmp_path / "mv")), lpjax.open_ensemble(str(tmp_path / "moments"))
    ok = np.asarray(stored.result[:]) == 0
    casimirs = np.asarray(stored.observables["casimirs"][:])[ok]
    m = reduced.moments["casimirs"]
    assert m.count == ok.sum() == 999 and not reduced.observables
    np.testing.assert_allclose(m.mean, casimirs.mean(axis=0), rtol=1e-12, atol=0)
    np.testing.assert_allclose(m.var, casimirs.var(axis=0, ddof=1), rtol=1e-12, atol=0)
    for m in METHODS:
        one = tmp_path / f"{m}-one"
        run(m, str(one))
        assert_same_store(tmp_path / m, one)
        attrs = zarr.open_group(str(tmp_path / m), mode="r").attrs
        assert attrs["processes"] == 2 and attrs["finished"]["processes"] == 2
        assert zarr.open_group(str(one), mode="r").attrs["finished"]["processes"] == 1
    said = [json.loads((tmp_path / f"said{i}.json").read_text()) for i in range(2)]
    assert all("process(es) [1] of 2 were given other settings" in s["other y0s"] for s in said)
    assert all("this process's own (jax.local_devices())" in s["devices"] for s in said)
    assert not (tmp_path / "never").exists()
    whole, own = run("mv", None), [np.load(tmp_path / f"own{i}.npz") for i in range(2)]
    assert [int(o["first"]) for o in own] == [0, 500]
    for name in ("final_state", "result", "y0s"):
        assert np.array_equal(np.concatenate([o[name] for o in own]), getattr(whole, name), equal_nan=True)


def _snapshot(path) -> dict:
    return {os.path.relpath(os.path.join(d, f), path): (os.stat(os.path.join(d, f)).st_mtime_ns,
                                                       open(os.path.join(d, f), "rb").read())
            for d, _, files in os.walk(path) for f in files}


def _untouched(before: dict, after: dict, done: np.ndarray) -> None:
    """Every file of the store before the resume is the same, but those of chunks not done and
    the group's attributes (``finished``)."""
    redone = {str(k) for k in np.flatnonzero(~done)}
    kept = [p for p in before if p != "zarr.json" and not ("/c/" in f"/{p}" and p.split("c/")[-1].split("/")[0] in redone)]
    assert len(kept) > 7 * int(done.sum())  # the done chunks' files of every array (and the inputs)
    assert all(after[p] == before[p] for p in kept), [p for p in kept if after[p] != before[p]][:5]


def test_a_process_killed_mid_run_resumes_on_one_or_two_processes(tmp_path):
    """Process 1 is killed (SIGKILL) when its third chunk is written but not marked; the launcher
    kills process 0 (it would wait for process 1 at the barrier). The store, resumed on one
    process and (a copy) on two, equals an uninterrupted run's bit for bit, and the files of the
    chunks marked done before the kill are not written again. Resuming with another dt is refused
    on both processes."""
    killed = tmp_path / "killed"
    assert launch(killed, "kill") == -9
    done = np.asarray(zarr.open_group(str(killed), mode="r")["chunk_done"][:]).astype(bool)
    assert 1 <= done[10:].sum() < 10 and not done.all(), done  # process 1 (chunks 10-19) stopped mid-way
    for resumed in ("one", "two"):
        shutil.copytree(killed, tmp_path / resumed)
    before = _snapshot(tmp_path / "one")
    run("mv", str(tmp_path / "one"), resume=True, n_steps=400, chunk_size=None)
    _untouched(before, _snapshot(tmp_path / "one"), done)
    before = _snapshot(tmp_path / "two")
    assert launch(tmp_path / "two", "resume") == 0
    _untouched(before, _snapshot(tmp_path / "two"), done)
    said = [json.loads((tmp_path / f"said{i}.json").read_text()) for i in range(2)]
    assert all("was made with other settings" in s["other dt"] for s in said)
    run("mv", str(tmp_path / "whole"), **KILLED)
    for resumed in ("one", "two"):
        assert_same_store(tmp_path / resumed, tmp_path / "whole")
    assert zarr.open_group(str(tmp_path / "two"), mode="r").attrs["finished"]["processes"] == 2


def test_the_command_line_starts_two_processes(tmp_path, capfd):
    """``lpjax ensemble --processes 2`` against one process: the same members (the default
    chunks of a store: at least 8 per process, of 64 members at least), to roundoff; one summary
    line."""
    args = ["ensemble", "rigid_body", "--n", "600", "-m", "mv", "--steps", "50", "--seed", "4", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "two"), "--processes", "2"]) == 0
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    two, one = lpjax.open_ensemble(str(tmp_path / "two")), lpjax.open_ensemble(str(tmp_path / "one"))
    assert two.settings["chunk_size"] == max(64, -(-600 // (8 * 2))) and two.settings["finished"]["processes"] == 2
    np.testing.assert_allclose(two.final_state[:], one.final_state[:], rtol=0, atol=1e-14)
    assert np.array_equal(two.y0s[:], one.y0s[:])
    capfd.readouterr()
    with pytest.raises(SystemExit, match="--processes 2: a process ended with status 1"):
        main([*args, "--out", str(tmp_path / "two"), "--processes", "2"])
    assert "already holds a store; pass --resume" in capfd.readouterr().err


@pytest.mark.skipif(sys.platform != "linux", reason="pins processes to cores with sched_setaffinity")
def test_the_launcher_pins_each_process_to_its_share_of_the_cores(tmp_path):
    code = "import os, sys; open(sys.argv[1] + os.environ['LPJAX_PROCESS_ID'], 'w').write(str(sorted(os.sched_getaffinity(0))))"
    assert launch_local(2, ["-c", code, str(tmp_path / "p")]) == 0
    cores = sorted(os.sched_getaffinity(0))
    got = [json.loads((tmp_path / f"p{i}").read_text()) for i in range(2)]
    assert got == ([cores[: len(cores) // 2], cores[len(cores) // 2 :]] if len(cores) > 1 else [cores, cores])


def test_without_cpu_affinity_the_launcher_and_the_native_kernel_run(tmp_path, monkeypatch):
    """macOS and Windows have no ``os.sched_getaffinity``/``sched_setaffinity``: there every core
    counts, the launcher pins nothing, and ``kernel="auto"`` (native where llvmlite is
    installed) runs as on Linux (simulated by removing both functions)."""
    y0s = np.random.default_rng(0).normal(size=(300, 3))
    system = lpjax.systems.rigid_body(np.array([1.0, 2.0, 3.0]))
    with_affinity = lpjax.ensemble(system, lpjax.MoserVeselov(), y0s, 0.01, 50, progress=False)
    for name in ("sched_getaffinity", "sched_setaffinity"):
        monkeypatch.delattr(os, name, raising=False)
    from lpjax._cores import usable_cores

    assert usable_cores() == list(range(os.cpu_count()))
    without = lpjax.ensemble(system, lpjax.MoserVeselov(), y0s, 0.01, 50, progress=False)
    assert without.settings["kernel"] == with_affinity.settings["kernel"]
    np.testing.assert_array_equal(without.final_state, with_affinity.final_state)
    code = "import os, sys; open(sys.argv[1] + os.environ['LPJAX_PROCESS_ID'], 'w').write('ran')"
    assert launch_local(2, ["-c", code, str(tmp_path / "p")]) == 0
    assert [(tmp_path / f"p{i}").read_text() for i in range(2)] == ["ran", "ran"]
