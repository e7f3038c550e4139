"""``ensemble``: many members at once, in chunks, with observables, per-member results, sharding
over devices and a resumable zarr store.

One member is one :func:`lpjax.integrate` run (the same ``init/step`` and the same result codes
and statistics). :func:`ensemble` reads as its stages: the inputs checked
(:mod:`._validate`), the run laid out (:class:`._plan.Plan`), the results opened (a store or
arrays, :class:`._results.Results`), the chunks run (:func:`._runner.run_chunks`), the solution
collected.
Chunks are the unit of dispatch, storage, progress and resume; inside a chunk the members run
in blocks, with the member axis last, by one of the kernels of :mod:`._kernel` (``vmap``-ed
scan, entry by entry, a fused Pallas kernel, or native). With several devices, each chunk is
split over them with ``shard_map``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Union

import equinox as eqx
import jax
import jax.numpy as jnp

from .._checks import cast_floats, is_traced, run_dtype
from .._integrator import AbstractIntegrator
from .._system import AbstractSystem
from .._adaptive import adaptive_member
from .._schedule import AdaptiveSchedule, adaptive_schedule
from ._kernel import EnsembleFunction, EnsembleOutput, platform_of, resolve_kernel, starts_as_given
from .._events import as_events, with_events
from .._member import FixedMember
from .._tangent_members import with_indicator
from .._tangents import is_indicator
from .._noise import key_words
from .._stochastic_member import StochasticMember, is_indexed, is_stochastic
from ._kernels import AbstractKernel
from .._memo import by_identity
from ._plan import Plan, make_plan
from ._results import Results
from ._runner import run_chunks
from ._store import EnsembleSolution, open_ensemble, stored_chunk_size
from ._validate import check_members, check_schedule, check_store_path, observe_fn, observe_nothing, validated

__all__ = ["ensemble", "ensemble_function", "EnsembleOutput", "EnsembleSolution", "open_ensemble"]


def _make_function(system, method, dt, n_steps: int, save_every: int, observe_fn, kernel: AbstractKernel, platform: str,
                   rdtype, batched: bool, stats: bool, adaptive: Optional[AdaptiveSchedule] = None,
                   events: tuple = (), key=None) -> EnsembleFunction:
    dyn, static = eqx.partition(system, eqx.is_array)
    indicator = observe_fn if is_indicator(observe_fn) else None  # tangent vectors beside the state
    if key is not None:  # a stochastic ensemble: each member's Wiener increments from fold_in(key, member)
        if indicator is not None or events or adaptive is not None:
            raise ValueError("ensemble: a stochastic ensemble has fixed steps, and no events or chaos indicators, for now")
        member = StochasticMember(static, method, jnp.asarray(dt, rdtype), n_steps, save_every, observe_fn,
                                  key_words(key), bool(stats))
        return EnsembleFunction(member, None if batched else dyn, batched, kernel, platform, type(system).__name__)
    if indicator is not None:
        observe_fn = observe_nothing
    if adaptive is None:
        member = FixedMember(static, method, jnp.asarray(dt, rdtype), n_steps, save_every, observe_fn, bool(stats))
    else:
        member = adaptive_member(static, method, adaptive, dt, observe_fn, rdtype)
    member = with_events(member if indicator is None else with_indicator(member, indicator), events)
    return EnsembleFunction(member, None if batched else dyn, batched, kernel, platform, type(system).__name__)


def ensemble_function(
    system: AbstractSystem,
    method: AbstractIntegrator,
    dt: Optional[float],
    n_steps: Optional[int] = None,
    *,
    save_every: Optional[int] = None,
    observe: Union[None, str, Callable] = None,
    kernel: Union[str, AbstractKernel] = "auto",
    platform: Optional[str] = None,
    dtype=None,
    batched_system: bool = False,
    stats: bool = False,
    controller=None,
    t1: Optional[float] = None,
    ts=None,
    max_steps: Optional[int] = None,
    error_estimate: Optional[str] = None,
    local_extrapolation: Optional[bool] = None,
    events=None,
    key=None,
) -> Callable[..., EnsembleOutput]:
    """The pure, jittable function of one chunk of :func:`ensemble`: ``f(y0s)`` (or
    ``f(y0s, systems)`` with ``batched_system=True``) runs every member of ``y0s`` (shape
    ``(N, d)``) for ``n_steps`` steps of ``dt`` and returns an :class:`EnsembleOutput`
    ``(final_state, observables, result, stats)``, members first, as :func:`ensemble` stores
    them. :func:`ensemble` is built on it (and adds chunks, the store, progress, threads and
    devices); use it directly inside your own ``jax.jit``: an outer optimisation over
    ensemble statistics, your own ``shard_map``, or to lower the GPU kernel for inspection.

    Args:
        save_every, observe, kernel, dtype, stats: as for :func:`ensemble` (``dtype`` default:
            float64 with JAX's x64 on, else float32; ``y0s`` must have it, and NumPy float64
            ``y0s`` with x64 off are an error, not truncated).
        platform: the platform to build for: ``"cpu"``, ``"gpu"`` (``"cuda"``, ``"rocm"``) or
            ``"tpu"`` (default: that of JAX's default device). It picks the kernel for
            ``kernel="auto"`` (the fused Triton kernel on a GPU, the scan elsewhere: the
            native kernel is a host callback, which JAX cannot differentiate) and the
            block size. ``platform="cuda"`` on a machine without a GPU gives the GPU kernel,
            for lowering and inspection with ``jax.export`` (``platforms=("cuda",)``); on CPU
            ``kernel="fused"`` runs in Pallas' interpret mode (slow: for tests).
        events: as for :func:`ensemble` (the record in the statistics: ``t_final``,
            ``event_count``, ``event_ts``, ``event_ys``, ``event_which``).
        controller, t1, ts, max_steps, error_estimate, local_extrapolation: an adaptive run, as
            for :func:`ensemble`
            (``dt`` is then the first step, or None).
        batched_system: ``system`` is batched over parameters (every array has a leading axis
            N, as ``eqx.filter_vmap`` of a constructor makes it); the function then takes the
            batched system (or its arrays, ``eqx.filter(systems, eqx.is_array)``) as its second
            argument, with N members in both.
        key: as for :func:`ensemble` (a stochastic system). Member ``j`` of a call is the ``j``-th
            row of ``y0s``, with the path of ``jax.random.fold_in(key, j)``; ``y0s`` may carry
            the members' indices in the ensemble as one more, last column (as :func:`ensemble`
            passes its chunks), for the paths of those members.

    The method is checked against one member's system here; ``y0s``' shape and dtype when the
    function is called (traced).
    """
    adaptive = adaptive_schedule(method, dt, n_steps, save_every, t1, ts, controller, max_steps, stats,
                                 "ensemble_function", error_estimate, local_extrapolation)
    events = as_events(events, "ensemble_function")
    if adaptive is None:
        n_steps, save_every = check_schedule(n_steps, save_every, dt, "ensemble_function")
    else:
        n_steps, save_every = len(adaptive.ts), 1
    rdtype = run_dtype(dtype, jnp.zeros((), float), "ensemble_function")
    system, method = cast_floats((system, method), rdtype)
    key = key if is_stochastic(system, method, None, key, "ensemble_function") else None
    check_members(system, method, batched_system, "ensemble_function")
    plat = platform_of(platform)
    # "auto" stays differentiable here: the native kernel is a host callback, for ensemble()
    kernel = resolve_kernel(kernel, plat, differentiable=True)
    fn = _make_function(system, method, dt, n_steps, save_every, observe_fn(observe)[1], kernel, plat, rdtype,
                        bool(batched_system), stats, adaptive, events, key)

    # a plain function (hashable, as jax.jit needs), over the module that holds the arrays
    def chunk(y0s, systems=None) -> EnsembleOutput:
        return fn(y0s, systems)

    chunk.__doc__ = EnsembleFunction.__doc__
    chunk.kernel, chunk.platform = fn.kernel, fn.platform
    return chunk


@by_identity
def _kernel_for(system, method, dt, plan: Plan, observe_name: str, observe_f, stats: bool,
                adaptive: Optional[AdaptiveSchedule], events: tuple, key=None):
    """``(fn, ends, keep)``: the chunk function that runs (the plan's kernel, or the scan where
    it cannot run the member program); whether the state observable's first and last saves are
    ``y0s`` and ``final_state`` (so not stored twice: the last always, the first where the
    method observes its initial state as given, :func:`._kernel.starts_as_given`); and the saves
    of the state the kernel returns (None: all, or no observable at all when none is left)."""
    def make(observe):
        return _make_function(system, method, dt, plan.n_steps, plan.save_every, observe, plan.kernel, plan.platform,
                              plan.dtype, plan.batched, stats, adaptive, events, key)

    fn, ends = make(observe_f), (False, False)
    width = plan.state_size + is_indexed(fn.member)  # (a stochastic member's index: one more column)
    if observe_name == "state":
        dyn = eqx.filter(system, eqx.is_array)
        one = jax.tree.map(lambda a: a[0], dyn) if plan.batched else dyn
        ends = starts_as_given(fn.member, one, jax.ShapeDtypeStruct((width,), plan.dtype)), True
    keep = (int(ends[0]), plan.n_save + 1 - ends[1]) if any(ends) else None
    if keep is not None and keep[0] == keep[1]:  # no save between the ends: the kernel observes nothing
        fn, keep = make(observe_nothing), None
    fn = fn.runnable(jax.ShapeDtypeStruct((plan.padded, width), plan.dtype),
                     jax.tree.map(lambda a: jax.ShapeDtypeStruct((plan.padded, *a.shape[1:]), a.dtype),
                                  eqx.filter(system, eqx.is_array)) if plan.batched else None)
    return fn, ends, keep


def _refuse_transforms(*args) -> None:
    """``TypeError`` where an array of ``args`` is traced: ``ensemble`` under a transform."""
    traced = [a for a in jax.tree.leaves(eqx.filter(args, eqx.is_array)) if is_traced(a)]
    if traced:
        raise TypeError(
            "ensemble runs eagerly (it plans chunks, writes stores and draws progress on the host), so it cannot run "
            f"under jax.jit, vmap or grad (got a traced {type(traced[0]).__name__}). Its transformable form is "
            "lpjax.ensemble_function: make f = lpjax.ensemble_function(system, method, dt, n_steps) once, outside "
            "the transform, and call f(y0s) inside it; over parameters, make it with batched_system=True and call "
            "f(y0s, eqx.filter(systems, eqx.is_array)), e.g. jax.grad(lambda p: loss(f(y0s, "
            "eqx.filter(make_systems(p), eqx.is_array)))).")


def ensemble(
    system: AbstractSystem,
    method: AbstractIntegrator,
    y0s,
    dt: Optional[float],
    n_steps: Optional[int] = None,
    *,
    controller=None,
    t1: Optional[float] = None,
    ts=None,
    max_steps: Optional[int] = None,
    error_estimate: Optional[str] = None,
    local_extrapolation: Optional[bool] = None,
    events=None,
    save_every: Optional[int] = None,
    observe: Union[None, str, Callable] = None,
    chunk_size: Optional[int] = None,
    out: Optional[str] = None,
    resume: bool = False,
    progress: Optional[bool] = None,
    throw: bool = False,
    stats: bool = False,
    dtype=None,
    devices: Optional[list] = None,
    metadata: Optional[dict] = None,
    batched_system: bool = False,
    kernel: Union[str, AbstractKernel] = "auto",
    key=None,
    reduce: Optional[str] = None,
) -> EnsembleSolution:
    """Integrate many members: initial states ``y0s`` (shape ``(N, d)``), a system batched over
    parameters (``batched_system=True``: every array of the system has a leading axis N, as
    ``eqx.filter_vmap`` of a constructor makes it; ``y0s`` may then be one state ``(d,)``), or
    both. Each member is one :func:`lpjax.integrate` run (``dt``, ``n_steps``), or, with a
    ``controller``, one adaptive run to ``t1`` with its own steps.

    Args:
        controller: an :class:`lpjax.PIDController`: each member adapts its own steps (``dt`` is
            then the first step, or None to select one per member as diffrax's
            ``PIDController`` does), to the final time ``t1``, saving at the times ``ts``
            (increasing, > 0, the last = ``t1``; default ``(t1,)``; the start is saved too). The
            steps land exactly on the save times (clipped, as diffrax's ``step_ts``), so each
            member is ``diffeqsolve(ODETerm, lpjax.diffrax.GaussLegendre(s,
            local_extrapolation=True), PIDController(..., step_ts=ts))`` and every save a state
            of the method, whose quadratic invariants hold to roundoff whatever the steps.
            ``local_extrapolation`` (default True, with step doubling): a member goes on from
            the two half steps, two steps of the method about ``2^{2s}`` times more accurate
            than the full step whose error is estimated, at no extra cost (GL4 at
            rtol = atol = 1e-11 on the rigid body to t = 10: 25 tolerances off, against 398);
            ``False`` goes on from the full step, as that solver's default does. Methods:
            ``GaussLegendre(s)`` and ``Collective(GaussLegendre(s))`` (the explicit maps have no
            error estimate and are refused). ``error_estimate``: ``"doubling"`` (default, the
            local error, three stage solves a step; as ``lpjax.diffrax.GaussLegendre``) or
            ``"defect"`` (``h·(u'(1) − f(y₁))`` of the step's collocation polynomial: one solve
            and one ``f`` a step, of order s + 1; its tolerance is not an error, choose it by
            measurement) (:mod:`lpjax._integrator._error_estimates`). A member makes at most
            ``max_steps`` attempts (default 16384), then stops with
            ``RESULTS.max_steps_reached``, its later saves holding the state it reached. The
            statistics are ``num_accepted_steps``, ``num_rejected_steps``, ``next_dt`` (the
            controller's next step) and ``t_reached``. Members run sorted by predicted cost
            (their selected first step), so that a block's members end together.
        save_every: steps between saves (default ``n_steps``: the start and the end only);
            must divide ``n_steps``.
        events: an :class:`lpjax.Event` or a list of them (fixed or adaptive steps): each member's crossings
            located by the method's own partial step and recorded (:attr:`EnsembleSolution.events`,
            also in a store); a terminal event stops its member there
            (``RESULTS.event_occurred``, not a failure), the later saves holding the event's state
            and ``stats["t_final"]`` (adaptive: ``t_reached``) its time.
        observe: what is kept at each save: ``None``/``"state"`` (the state), ``"casimirs"``,
            ``"energy"`` (of each member's own system), or a function ``y -> pytree`` of arrays
            (a Casimir drift, Γ₃, ...). Memory is N × saves × observable, never the trajectory.
        chunk_size: members per chunk, the unit of dispatch, storage, progress and resume
            (default 16384 on CPU, 2²⁰ native or on an accelerator, where the chunks are made
            equal: N = 10⁷ runs as 10 chunks of 10⁶; at most N, and at most
            N / (processes × worker threads), 2048 at least on CPU; with ``out``, at most
            N / (8 × processes × worker threads), 64 at least, so that an interrupted or killed
            run keeps its finished chunks; a resumed run keeps its store's). Within a chunk the
            members run in blocks of 2048 (CPU scan; time inside block, members last).
            Ctrl-C (``KeyboardInterrupt``) stops the run once the chunks running are done and
            written, and a store is then resumable (``resume=True``).
        out: a zarr v3 store (a directory) written chunk by chunk; its attributes hold the
            lpjax version, the system and method, dt, n_steps, ``metadata`` (e.g. seeds), the
            creation time and the settings' fingerprint. It is checked for writing before any work.
        resume: finish an existing store made with the same settings (only its missing chunks
            run, on any number of processes; the arrays come out bit-identical to an
            uninterrupted run); another store's settings are refused.
        progress: a progress bar over chunks (tqdm); default on when stderr is a terminal.
        throw: raise ``RuntimeError`` naming the failed members at the end. Otherwise a failed
            member only has its own ``result`` code: it never stops or changes the others.
        stats: also collect the solver statistics ``max_residual``, ``max_iterations`` and
            ``mean_iterations`` (each step of an implicit method then evaluates its residual
            once more, and keeps running maxima and sums: about a fifth of Moser–Veselov's
            arithmetic). By default only ``num_failed_steps`` is kept, beside the result codes.
        dtype: float32 or float64 for the states and the system's arrays (default ``y0s``'s);
            float64 with JAX's x64 off is an error, whether asked for or given as NumPy
            float64 ``y0s`` (which JAX would run in float32 without a word).
        devices: the devices of this process to split each chunk over (``shard_map`` on the
            member axis; default all of ``jax.local_devices()`` when there are several).
            ``kernel="auto"`` is one device's kernel whatever their number (the native kernel
            runs whole chunks on the host's cores), and its results, like the fused kernel's,
            match one device bit for bit; the scan kernel's agree to roundoff.
        kernel: how a block of members runs (the results agree to roundoff): an object of
            :mod:`lpjax.kernels`, with its options, or the shorthand of one with its defaults:

            - ``"scan"``, :class:`lpjax.kernels.Scan`: the member program under ``vmap``, a
              ``lax.scan`` over the steps;
            - ``"entries"``, :class:`lpjax.kernels.Entries`: the member program entry by entry
              over the block, in a scan (every value a vector over the members);
            - ``"fused"``, :class:`lpjax.kernels.Fused`: one Triton kernel (Pallas) per block of
              members with the whole time loop inside; on CPU it runs in Pallas' interpret
              mode (slow: for tests);
            - ``"native"``, :class:`lpjax.kernels.Native` (CPU, ``pip install 'lpjax[cpu]'``):
              the member program compiled by LLVM into one function: chunks over the cores,
              the time loop outside member loops that vectorize; cached on disk;
            - ``"auto"`` (default): ``"fused"`` on a GPU; on CPU ``"native"`` when llvmlite is
              installed (and one device is used), else ``"scan"``.

            A program the kernel cannot run (a primitive it does not know) falls back to
            ``"scan"`` with a warning naming the primitive, once per method, system and kernel.
            The settings record the kernel that ran by its shorthand.
        key: for a :class:`lpjax.StochasticLiePoissonSystem` (with a stochastic method), a JAX key
            (``jax.random.key(seed)``): member ``j`` runs the path of ``jax.random.fold_in(key,
            j)``, its increments counter-based (step ``n``'s from that key's Threefry block at
            ``n``), so that it is :func:`lpjax.integrate` with that key, in every kernel, for any
            chunking, process count or resume (the key is in the settings: a store resumes with
            its own). Fixed steps; no events or indicators.
        reduce: ``"moments"`` keeps, of each observable, only its mean and sample variance across
            the members that did not fail, at each save (:attr:`EnsembleSolution.moments`,
            ``observables`` empty): per chunk, combined in the chunks' order by Chan's pairwise
            update (:mod:`._moments`), so that processes, chunking and a resume give the same
            numbers to roundoff. No state is kept (``final_state`` is None); per member only the
            result codes and statistics, and a store compresses its inputs: kilobytes for
            members that start alike.

    **Several processes** (after ``jax.distributed.initialize()``, by the user, a launcher, or
    ``lpjax ensemble --processes K``/``--distributed``): every process calls :func:`ensemble` with
    the same arguments (refused otherwise) and runs its share of the chunks on its own devices:
    a contiguous run of the chunks still to do. With ``out`` (a directory every process can
    reach, e.g. on a shared file system) they write into the one store, process 0 writes its
    final attributes once all are done, and each returns the whole solution; ``resume=True``
    after a lost process runs the missing chunks on any number of processes. Without ``out``
    each process returns only its own members (:attr:`EnsembleSolution.first_member` says
    where they start). See the documentation's "Running on a cluster".

    Returns an :class:`EnsembleSolution`. Each chunk is one call of the pure function that
    :func:`ensemble_function` returns for the same arguments. :func:`ensemble` runs eagerly (it
    plans, writes a store and draws progress on the host): under ``jax.jit``, ``vmap`` or
    ``grad`` it refuses, naming :func:`ensemble_function`, its transformable form.
    """
    _refuse_transforms(system, y0s, dt, t1, ts)
    check_store_path(out)
    key = key if is_stochastic(system, method, None, key, "ensemble") else None
    if reduce not in (None, "moments"):
        raise ValueError(f"ensemble: reduce must be None or 'moments' (the mean and variance across the members), "
                         f"got {reduce!r}")
    adaptive = adaptive_schedule(method, dt, n_steps, save_every, t1, ts, controller, max_steps, stats, "ensemble",
                                 error_estimate, local_extrapolation)
    events = as_events(events, "ensemble")
    if adaptive is not None:  # one step of the kernels' programs is every attempt up to the next save time
        n_steps, save_every = len(adaptive.ts), 1
    inp = validated(system, method, y0s, adaptive.ts[0] if adaptive and dt is None else dt, n_steps, save_every,
                    dtype, batched_system, metadata)
    if chunk_size is None and resume and out is not None:
        chunk_size = stored_chunk_size(out)  # a run resumed elsewhere (other processes, cores) keeps its chunks
    plan = make_plan(*inp.y0s.shape, inp.n_steps, inp.save_every, inp.dtype, inp.batched, kernel, devices, chunk_size,
                     jax.process_count(), jax.process_index(), store=out is not None)
    observe_name, observe_f = observe_fn(observe)
    fn, ends, keep = _kernel_for(inp.system, inp.method, dt, plan, observe_name if reduce is None else reduce, observe_f,
                                 bool(stats), adaptive, events, key)  # (reduced: the kernel returns every save)
    plan = dataclasses.replace(plan, kernel=fn.kernel)  # is what the settings and the store record
    results = Results(plan, inp, dt, observe_name, observe_f, out, resume, metadata, bool(stats), ends, adaptive,
                      events, None if key is None else [int(w) for w in key_words(key)], reduce)
    run_chunks(plan, fn, inp, results, progress, keep)
    return results.solution(throw)
