"""The native CPU ensemble kernel: one member's program compiled into the loop a numba
programmer writes by hand.

The member program (``init``, ``step``, ``observe``, ``summary``: the pieces of
:class:`lpjax._member.AbstractMember`) is traced to jaxprs, and the entrywise evaluator of
:mod:`lpjax._ensemble._kernels._entrywise` runs over them with a context (:class:`._rules.IR`) that
writes LLVM IR (:mod:`._source` writes the whole kernel): every array value of the member program
becomes an object array of scalar SSA values, every primitive on them one instruction, data
movement with indices known at trace time moves names, and constants fold at trace time.
llvmlite compiles the module for the host CPU (LLVM's ``O3`` pipeline with its loop
vectorizer) into one function, ``run_chunks``:

* over cache-sized chunks of members (:data:`CHUNK`, or the kernel's ``chunk``), spread over a
  thread pool (the machine code runs without the GIL);
* per chunk, one contiguous local array per scalar of the member's carry (state, result code,
  statistics);
* the time loop outside loops over the members, marked parallel (each iteration touches its
  own member) so that LLVM vectorizes them across members;
* a loop of the member program (an implicit solve, fixed iterations) as passes over the chunk,
  each a member loop (:mod:`lpjax._ensemble._kernels._native._loops`); a ``while`` as masked passes while any
  member's condition holds (measured against a loop per member inside the member loop, which
  cannot vectorize: Moser–Veselov 3.5× faster, GL4 1.07–1.12×); values that cross from one
  member loop to a later one go through a scratch array of the chunk;
* the observables written at the saves, then the final state, result codes and statistics;
* operations on values that are the same for the whole run (the system's arrays, when they are
  not batched) hoisted to the entry block; a carry entry that a step leaves as it is (the
  statistics of an explicit step) neither loaded nor stored; ``(−x)·y`` written as ``−(x·y)`` so
  that the product is shared with ``x·y`` (a skew matrix's two triangles); and a conjunction of
  finiteness tests as one test that the sum of the ``x − x`` is not NaN. Each is exact;
* an explicit step (no loops) runs speculatively between saves (:mod:`lpjax._ensemble._kernels._native._source`): its
  finiteness tests taken as passed, so that the result code and the failed-step count are
  neither loaded nor stored, while the tested values are summed (those whose inf or NaN would
  last in the carry only once, in the carry after the steps); a chunk whose sum is not finite
  runs those steps again as written, from a copy of its carry. Exact as well (Suris on the
  rest-frame top, N = 10⁵ × 200: the kernel 1.3–1.4× faster on 1 and 2 threads, measured).

Every member runs the same instructions whatever its chunk and thread, without reassociation
or contraction (no fast-math flags; a vector lane computes what the scalar code does), so
results do not depend on the thread count or the chunk size. A member's values do not change
once its own ``while`` condition fails (the semantics of ``vmap``). On x86
the kernel flushes denormal inputs and results to zero while it runs, as XLA:CPU does.

The object code is written to the cache directory (``$LPJAX_CACHE_DIR``, else
``$XDG_CACHE_HOME/lpjax`` or ``~/.cache/lpjax``), named by the hash of the IR and the host CPU:
a second process with the same program loads it without compiling. Loaded kernels are also
kept in memory, by the member program's structure and shapes. :func:`lpjax.ensemble` calls the
kernel on numpy arrays (:func:`run_native_host`); inside JAX (``ensemble_function``) it is a
``jax.pure_callback`` (:func:`run_native`).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import tempfile
import threading

import equinox as eqx
import jax
import numpy as np

from ...._cores import usable_cores
from ...._memo import by_identity
from .._entrywise import Unfusable, member_avals, trace_member
from ._source import source

__all__ = ["available", "run_native", "run_native_host", "cache_dir", "CHUNK"]

# The run's options are those of its kernel object, ``settings`` below (lpjax.kernels.Native: ``chunk``,
# ``threads``, ``speculate_every``, ``split``, ``max_lines``); their defaults:
CHUNK = 256  # members per chunk: a chunk's carry and its values between loops (8 bytes each) stay in L2
ADAPTIVE_CHUNK = 32  # for adaptive members, whose chunks run as long as their slowest member (measured)
TASKS = 16  # runs of chunks per thread in the queue that the threads take them from
POOL_TASKS = 4  # runs of members per thread for a program whose members finish early (each run one pool of lanes)
_loaded: dict = {}
compiled = [0]  # how many kernels this process compiled (not loaded from the disk cache)


def available() -> bool:
    """Whether llvmlite (the ``lpjax[cpu]`` extra) can be imported."""
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError:
        return False
    return True


def cache_dir() -> str:
    """Where the object code of compiled kernels goes."""
    base = os.environ.get("LPJAX_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lpjax")
    return os.path.join(base, "native")


# ------------------------------------------------------------------------------- compiling


@functools.cache
def _target():
    """The host's target machine and LLVM's O3 pipeline (with the loop and SLP vectorizers)."""
    import llvmlite
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3,
                                                                  reloc="static", codemodel="jitdefault")
    tag = f"{llvmlite.__version__}|{llvm.get_default_triple()}|{cpu}|{features}"
    return llvm, tm, tag


def _compile(source: str) -> bytes:
    """Object code of the IR ``source`` for the host."""
    llvm, tm, _ = _target()
    module = llvm.parse_assembly(source)
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    module.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    return tm.emit_object(module)


def _write_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


def _load(source: str):
    """The compiled ``run_chunks`` of ``source`` (from memory, from the object file named by the
    hash of the IR and the host, or compiled now and saved there)."""
    llvm, tm, tag = _target()
    key = hashlib.sha256((tag + "\n" + source).encode()).hexdigest()[:32]
    if key in _loaded:
        return _loaded[key][1]
    path = os.path.join(cache_dir(), f"kernel_{key}.o")
    try:
        with open(path, "rb") as f:
            obj = f.read()
    except OSError:
        obj = _compile(source)
        compiled[0] += 1
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomic(path, obj)
        except OSError:  # an unwritable cache: this process only
            pass
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    fn = _SIGNATURE(engine.get_function_address("run_chunks"))
    _loaded[key] = (engine, fn)  # the engine owns the machine code
    return fn


class _Program:
    """A compiled member program: ``(y0s, member arrays, system arrays)`` (numpy, members
    first) to ``(summary, saved)`` (numpy, members first), its chunks of ``chunk`` members
    spread over ``threads`` threads (None: one per usable core)."""

    def __init__(self, kernel, chunk: int, threads, scratch: int, shapes: dict, n_save: int, pooled: bool = False):
        self.kernel, self.chunk, self.threads, self.scratch, self.pooled = kernel, chunk, threads, scratch, pooled
        self.shapes, self.n_save = shapes, n_save
        sums, obs = jax.tree.leaves(shapes["summary"]), jax.tree.leaves(shapes["observe"])
        self.out = [((), a) for a in sums] + [((n_save + 1,), a) for a in obs]
        self.n_sum = len(sums)

    def out_shapes(self, B: int) -> list:
        return [jax.ShapeDtypeStruct((B, *lead, *a.shape), a.dtype) for lead, a in self.out]

    def __call__(self, y0s, mem_leaves, dyn_leaves, out=None) -> tuple:
        """``out``: destination arrays in the layout of the result (a leaf that is not a
        C-contiguous array of the right shape and dtype, or None, is allocated)."""
        B = y0s.shape[0]
        dest = jax.tree.leaves(out) if out is not None else []
        dest = dest if len(dest) == len(self.out) else [None] * len(self.out)
        outs = [d if isinstance(d, np.ndarray) and d.shape == s.shape and d.dtype == s.dtype and d.flags.c_contiguous
                and d.flags.writeable else np.empty(s.shape, s.dtype) for d, s in zip(dest, self.out_shapes(B))]
        keep = [np.ascontiguousarray(a) for a in (y0s, *mem_leaves, *dyn_leaves)] + outs
        args = (ctypes.c_void_p * len(keep))(*[a.ctypes.data for a in keep])
        chunk, kernel = self.chunk, self.kernel

        n_chunks = -(-B // chunk)
        workers = max(1, min(self.threads or len(usable_cores()), n_chunks))
        # a queue of runs of whole chunks, TASKS per worker, taken in order by the workers as they
        # finish: members of unequal cost (adaptive steps, sorted by predicted cost, the dearest
        # first) are spread over the threads as they run, not in equal shares of members
        tasks = min(n_chunks, workers * (TASKS if workers > 1 else 1))
        bounds = [min(B, chunk * (n_chunks * k // tasks)) for k in range(tasks + 1)]
        if self.pooled:  # a pool of lanes per run of members (_pool): runs of several chunks, POOL_TASKS a worker
            tasks = min(n_chunks, workers * POOL_TASKS)
            bounds = [B * k // tasks for k in range(tasks + 1)]
        queue = iter(range(tasks))
        lock = threading.Lock()

        def run():  # one worker: the next run of chunks until none is left
            scratch = np.empty(max(1, self.scratch), np.float64)
            while True:
                with lock:
                    k = next(queue, None)
                if k is None:
                    return
                kernel(bounds[k], bounds[k + 1], B, ctypes.addressof(args), scratch.ctypes.data)

        # workers write disjoint rows; the machine code runs without the GIL; this thread is a worker
        others = [_pool(workers - 1).submit(run) for _ in range(1, workers)] if workers > 1 else []
        run()
        for f in others:
            f.result()
        return self.unpack(outs)

    def unpack(self, outs):
        return (jax.tree.unflatten(jax.tree.structure(self.shapes["summary"]), list(outs[:self.n_sum])),
                jax.tree.unflatten(jax.tree.structure(self.shapes["observe"]), list(outs[self.n_sum:])))


@functools.cache
def _pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool kept for the process (starting threads costs about a millisecond a call)."""
    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="lpjax-native")


_programs: dict = {}


def _program(member, dyn_leaves, dyn_tree, d: int, dtype, n_save: int, batched: bool, settings) -> _Program:
    """The compiled program of ``member`` with the kernel's ``settings`` (cached by its structure,
    shapes and settings)."""
    if not available():
        raise Unfusable("llvmlite is not installed (pip install 'lpjax[cpu]')")
    mem_dyn, mem_static = eqx.partition(member, eqx.is_array)
    mem_leaves, mem_tree = jax.tree.flatten(mem_dyn)
    mem_avals, dyn_avals = member_avals(mem_leaves, False), member_avals(dyn_leaves, batched)
    static_leaves, static_tree = jax.tree.flatten(mem_static)
    key = (mem_tree, static_tree, tuple(static_leaves), dyn_tree, tuple((a.shape, a.dtype) for a in mem_avals + dyn_avals),
           d, np.dtype(dtype), n_save, batched, settings)
    prog = _programs.get(key)
    if prog is None:
        try:
            prog = _build(member, mem_tree, mem_static, mem_avals, dyn_tree, dyn_avals, d, dtype, n_save, batched,
                          settings)
        except Unfusable as e:  # said once by the caller; not traced again
            prog = e
        _programs[key] = prog
    if isinstance(prog, Unfusable):
        raise prog
    return prog


def _build(member, mem_tree, mem_static, mem_avals, dyn_tree, dyn_avals, d, dtype, n_save, batched,
           settings) -> _Program:
    def piece(name):
        def fn(mem_l, dyn_l, *rest):
            m = eqx.combine(jax.tree.unflatten(mem_tree, mem_l), mem_static)
            return getattr(m, name)(jax.tree.unflatten(dyn_tree, dyn_l), *rest)

        return fn

    y_aval = jax.ShapeDtypeStruct((d,), dtype)
    pieces, shapes = {}, {}
    pieces["init"], carry_shape = trace_member(piece("init"), mem_avals, dyn_avals, y_aval)
    for name in ("step", "observe", "summary", "finished"):
        pieces[name], shapes[name] = trace_member(piece(name), mem_avals, dyn_avals, carry_shape)
    if shapes.pop("finished") is None:  # (members that all run to the end)
        del pieces["finished"]
    else:  # finished members leave the pool's lanes before their next step (_pool)
        pieces["step"], _ = trace_member(piece("step_running"), mem_avals, dyn_avals, carry_shape)
    carry_avals = jax.tree.leaves(carry_shape)
    text, scratch = source(pieces, {"mem": mem_avals, "dyn": dyn_avals, "y": y_aval, "carry": carry_avals,
                           "obs": jax.tree.leaves(shapes["observe"]), "sum": jax.tree.leaves(shapes["summary"])},
                           n_save, member.save_every, batched, _chunk(member, settings), settings.split,
                           settings.speculate_every, _target()[1].triple.startswith("x86_64"))
    lines = text.count("\n")
    if lines > settings.max_lines:
        raise Unfusable(f"the member program is {lines} instructions, over the {settings.max_lines} that LLVM compiles "
                        "in seconds")
    return _Program(_load(text), _chunk(member, settings), settings.threads, scratch, shapes, n_save,
                    "finished" in pieces)


def _chunk(member, settings) -> int:
    """Members per chunk: the kernel's ``chunk``, by default :data:`ADAPTIVE_CHUNK` for an
    adaptive member program (its chunks run as long as their slowest member: on 1000 heavy tops
    whose costs span two decades, sorted by predicted cost, GL6 runs 2.4x faster in chunks of 32
    than of 256), else :data:`CHUNK`."""
    return settings.chunk or (ADAPTIVE_CHUNK if member.sorts else CHUNK)


def _leaves(member, dyn):
    return jax.tree.leaves(eqx.filter(member, eqx.is_array)), *jax.tree.flatten(dyn)


def run_native(member, dyn, y0s, n_save: int, batched: bool, settings):
    """The member program ``member`` for the members ``y0s`` (``(B, d)``) of the system arrays
    ``dyn`` (with a leading member axis if ``batched``), as one native kernel called through
    ``jax.pure_callback``, with the options ``settings`` (an :class:`lpjax.kernels.Native`).
    Returns ``(summary, saved)`` with the members first, like the other kernels. Raises
    :class:`Unfusable` (at trace time) for a program it cannot compile."""
    mem_leaves, dyn_leaves, dyn_tree = _leaves(member, dyn)
    prog = _program(member, dyn_leaves, dyn_tree, y0s.shape[1], y0s.dtype, n_save, batched, settings)
    n_mem = len(mem_leaves)

    def host(y, *arrays):
        return tuple(jax.tree.leaves(prog(y, arrays[:n_mem], arrays[n_mem:])))

    outs = jax.pure_callback(host, tuple(prog.out_shapes(y0s.shape[0])), y0s, *mem_leaves, *dyn_leaves,
                             vmap_method="sequential")
    return prog.unpack(outs)


def native_program(member, dyn, d: int, dtype, n_save: int, batched: bool, settings) -> None:
    """Build (and cache) the native program of ``member`` for system arrays ``dyn`` (arrays or
    ``ShapeDtypeStruct``) and states of size ``d``; :class:`Unfusable` where it cannot."""
    _, dyn_leaves, dyn_tree = _leaves(member, dyn)
    _program(member, dyn_leaves, dyn_tree, d, dtype, n_save, batched, settings)


def run_native_host(member, dyn, y0s: np.ndarray, n_save: int, batched: bool, settings, out=None):
    """:func:`run_native` on numpy arrays, outside JAX: ``(summary, saved)`` as numpy arrays,
    written into the arrays of ``out`` (a pytree of that layout) where they fit (no copy)."""
    prog, mem_arrays, dyn_arrays = _host_program(member, dyn, y0s.shape[1], y0s.dtype, n_save, batched, settings)
    return prog(y0s, mem_arrays, dyn_arrays, out)


@by_identity
def _host_program(member, dyn, d: int, dtype, n_save: int, batched: bool, settings: tuple):
    """The program of :func:`run_native_host` and its arrays as numpy, remembered for the same
    (immutable) member and system arrays and the kernel's ``settings``."""
    mem_leaves, dyn_leaves, dyn_tree = _leaves(member, dyn)
    prog = _program(member, dyn_leaves, dyn_tree, d, np.dtype(dtype), n_save, batched, settings)
    return prog, [np.asarray(a) for a in mem_leaves], [np.asarray(a) for a in dyn_leaves]
