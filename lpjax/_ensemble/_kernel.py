"""The chunk function of :func:`lpjax.ensemble` and :func:`lpjax.ensemble_function`: one
member's program (``init``, ``advance`` by ``save_every`` steps, ``observe``, ``summary``, the
same ``init/step`` and result codes as :func:`lpjax.integrate`), the kernel's choice (a
shorthand or an object of :mod:`lpjax.kernels`, :func:`resolve_kernel`) and
:class:`EnsembleFunction`, the pure, jittable function of one chunk: members first in and out,
padded to whole blocks inside, run by its kernel (:mod:`._kernels`) with the member axis last.
"""

from __future__ import annotations

import os
import warnings
from typing import NamedTuple, Optional, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from .._member import AbstractMember, in_cost_order
from .._stochastic_member import indexed_states, is_indexed
from ._validate import checked_inputs
from .._checks import as_numbers, external_stacklevel, refuse_silent_float32
from ._kernels import AbstractKernel, Entries, Fused, Native, Scan, Unfusable, native_available

__all__ = ["EnsembleFunction", "EnsembleOutput", "KERNELS", "platform_of", "resolve_kernel", "warn_once"]

_SHORTHANDS = {"scan": Scan, "entries": Entries, "fused": Fused, "native": Native}
KERNELS = ("auto", *_SHORTHANDS)
_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
_warned: set = set()
_verdicts: dict = {}  # EnsembleFunction.runnable's (None, or why the kernel cannot run the program), starts_as_given's


def _avals(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((tuple(a.shape), np.dtype(a.dtype)) for a in leaves)


def warn_once(message: str, key=None) -> None:
    """A ``UserWarning``, once per message (and ``key``), at the first line of the call stack
    outside lpjax."""
    if (message, key) not in _warned:
        _warned.add((message, key))
        warnings.warn(message, stacklevel=external_stacklevel())


def platform_of(platform: Optional[str], devices=None) -> str:
    """``"cpu"``, ``"gpu"`` or ``"tpu"``: ``platform`` (``"cuda"`` and ``"rocm"`` are ``"gpu"``),
    else that of the first of ``devices`` (default: JAX's default backend)."""
    if platform is None:
        platform = (devices[0] if devices else jax.devices()[0]).platform
    if not isinstance(platform, str) or platform.lower() not in _PLATFORMS:
        raise ValueError(f"platform must be one of {', '.join(map(repr, _PLATFORMS))} or None, got {platform!r}")
    return _PLATFORMS[platform.lower()]


def resolve_kernel(kernel: Union[str, AbstractKernel], platform: str, differentiable: bool = False) -> AbstractKernel:
    """The kernel object of ``kernel`` (an object of :mod:`lpjax.kernels`, or the shorthand of
    one with its defaults), checked for ``platform``. ``"auto"``: :class:`Fused` on a GPU; on
    CPU :class:`Native` when llvmlite is installed (the ``lpjax[cpu]`` extra), the run need not
    be ``differentiable`` (the native kernel is a host callback) and ``$LPJAX_CPU_KERNEL`` is
    not ``scan``, else :class:`Scan`; :class:`Scan` elsewhere."""
    if isinstance(kernel, str) and kernel == "auto":
        kernel = Scan()
        if platform == "gpu":
            kernel = Fused()
        elif platform == "cpu":  # $LPJAX_CPU_KERNEL=scan opts out of the native kernel
            choice = os.environ.get("LPJAX_CPU_KERNEL", "native")
            if choice not in ("native", "scan"):
                raise ValueError(f"LPJAX_CPU_KERNEL must be 'native' or 'scan', got {choice!r}")
            if choice == "native" and native_available() and not differentiable:
                kernel = Native()
    elif isinstance(kernel, str) and kernel in _SHORTHANDS:
        kernel = _SHORTHANDS[kernel]()
    elif not isinstance(kernel, AbstractKernel):
        raise ValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))} or a kernel of lpjax.kernels "
                         f"(Scan(), Entries(), Fused(...), Native(...)), got {kernel!r}")
    kernel.check(platform)
    return kernel


def starts_as_given(member, dyn_m, y0) -> bool:
    """Whether the first save of the state observable of ``member`` (a member program) is ``y0``
    itself, bit for bit: the traced program of ``observe(init(y0))`` returns its input unchanged
    (decided from the program, not assumed of the method: a collective method's is its momentum
    map of the lifted state, equal to ``y0`` only to roundoff)."""
    key = ("starts", eqx.partition(member, eqx.is_array)[1], _avals(eqx.filter(member, eqx.is_array)), _avals(dyn_m),
           _avals(y0))
    if key not in _verdicts:  # traced once per program and shapes
        closed = jax.make_jaxpr(lambda y: member.observe(dyn_m, member.init(dyn_m, y)))(y0)
        outs = jax.tree.leaves(closed.jaxpr.outvars)
        _verdicts[key] = len(outs) == 1 and outs[0] is closed.jaxpr.invars[0]
    return _verdicts[key]


class EnsembleOutput(NamedTuple):
    """What :class:`EnsembleFunction` returns for ``N`` members (members first): the final
    states ``(N, d)``, the observables ``{name: (N, n_save + 1, ...)}`` at the saves (the start
    first), the result codes ``(N,)`` (:class:`lpjax.RESULTS` values; names in
    :attr:`lpjax.EnsembleSolution.result_names`) and the statistics ``{name: (N,)}``
    (``max_residual``, ``max_iterations``, ``mean_iterations``, ``num_failed_steps``)."""

    final_state: Array
    observables: dict
    result: Array
    stats: dict


@final
class EnsembleFunction(eqx.Module):
    """The pure function of one chunk of an ensemble (made by :func:`lpjax.ensemble_function`).

    ``f(y0s)``, or ``f(y0s, system_arrays)`` for a system batched over parameters, returns an
    :class:`EnsembleOutput` with the members first. Any number of members: they are padded
    to whole blocks inside (with copies of themselves) and the padding is dropped. Jittable,
    ``vmap``-free and without side effects, so it goes inside a user's own ``jax.jit``, a
    ``shard_map``, or an outer optimisation; ``jax.jit(f)`` compiles it once per shape.

    Attributes: ``kernel`` (an object of :mod:`lpjax.kernels`) and ``platform``
    (``"cpu"``, ``"gpu"`` or ``"tpu"``) that it was made for. A program that the entrywise
    evaluator cannot run (a primitive it does not know) runs with ``"scan"`` instead, with a
    warning once.
    """

    member: AbstractMember
    system_arrays: PyTree
    batched: bool = eqx.field(static=True)
    kernel: AbstractKernel = eqx.field(static=True)
    platform: str = eqx.field(static=True)
    system_type: str = eqx.field(static=True)

    def __call__(self, y0s: Array, system_arrays: PyTree = None) -> EnsembleOutput:
        if self.batched:
            if system_arrays is None:
                raise TypeError("this ensemble function is for a system batched over parameters: call it as "
                                "f(y0s, system_arrays) with the batched system (or eqx.filter(systems, eqx.is_array))")
            dyn = eqx.filter(system_arrays, eqx.is_array)
        elif system_arrays is not None:
            raise TypeError("this ensemble function is for one system (batched_system=False): call it as f(y0s)")
        else:
            dyn = self.system_arrays
        dtype = self.member.dtype
        refuse_silent_float32(y0s, "ensemble function", "y0s")
        if not isinstance(y0s, jax.Array):  # NumPy, lists; a string is refused as not numbers
            y0s = as_numbers(y0s, "ensemble function: y0s")
        if jnp.ndim(y0s) != 2 or jnp.result_type(y0s) != dtype:
            raise ValueError(f"ensemble function: y0s must be an array of shape (N, d) and dtype {dtype} (the run's), "
                             f"got shape {jnp.shape(y0s)} and dtype {jnp.result_type(y0s)}")
        N = y0s.shape[0]
        one = jax.tree.map(lambda a: a[0], dyn) if self.batched else dyn
        if is_indexed(self.member):  # a stochastic member's index in the ensemble, as a last column (or 0 … N − 1)
            d = self.member.system(one).dim
            y0s = y0s if y0s.shape[1] == d + 1 else indexed_states(y0s, jnp.arange(N))
            self.member.system(one).check_state(y0s[0, :d])
        else:
            self.member.system(one).check_state(y0s[0])  # the shape of a state, named
        if self.batched:
            sizes = {a.shape[0] if a.ndim else None for a in jax.tree.leaves(dyn)}
            if sizes != {N}:
                raise ValueError(f"ensemble function: y0s has N = {N} members, the batched system's arrays have leading "
                                 f"sizes {sorted(sizes, key=str)}")
        y0s = checked_inputs(self.member, dyn, self.batched, y0s)  # a traced system's values, in the program
        try:
            return self._run(dyn, y0s, self.kernel)
        except Unfusable as e:
            self._fell_back(e)
            return self._run(dyn, y0s, Scan())

    def runnable(self, y0s: jax.ShapeDtypeStruct, system_arrays: PyTree = None) -> "EnsembleFunction":
        """This function, or the same with :class:`lpjax.kernels.Scan` where its kernel cannot run
        the member program (a primitive it does not know, a program too long) for chunks like
        ``y0s`` (and the arrays of the batched system, ``system_arrays``; either may be
        ``ShapeDtypeStruct``): what :func:`lpjax.ensemble` runs and records, decided before any
        work, with the warning (once) at the caller's line."""
        dyn = system_arrays if self.batched else self.system_arrays
        mem_dyn, mem_static = eqx.partition(self.member, eqx.is_array)
        key = (self.kernel, self.platform, self.batched, mem_static, _avals(mem_dyn), _avals(dyn), _avals(y0s))
        if key not in _verdicts:  # a trace of the kernel (about 0.5 s for the fused one), once
            try:
                self.kernel.prepare(self.member, dyn, y0s, self.batched, self.platform)
                _verdicts[key] = None
            except Unfusable as e:
                _verdicts[key] = e
        if _verdicts[key] is None:
            return self
        self._fell_back(_verdicts[key])
        return EnsembleFunction(self.member, self.system_arrays, self.batched, Scan(), self.platform, self.system_type)

    def _fell_back(self, e: Unfusable) -> None:
        warn_once(f"lpjax.ensemble: {type(self.member.method).__name__} on {self.system_type} cannot run "
                  f"{self.kernel.how} ({e}); using kernel='scan'", self.kernel)

    def host(self, y0s: np.ndarray, system_arrays: PyTree = None, into: Optional[dict] = None) -> EnsembleOutput:
        """A kernel that runs on the host (:attr:`lpjax.kernels.AbstractKernel.on_host`, the native
        one) outside JAX, as :func:`lpjax.ensemble` calls it: numpy arrays in and out, without a
        device round trip. ``into``: arrays named as in a store (``final_state``, ``result``,
        ``observables/<name>``, ``stats/<name>``) that the kernel writes into where their shape
        and dtype fit. ``y0s`` is checked by the caller."""
        dyn = system_arrays if self.batched else self.system_arrays
        part = (lambda head: {k[len(head):]: a for k, a in into.items() if k.startswith(head)}) if into else None
        dest = into and not self.member.sorts and ((into.get("final_state"), into["result"], part("stats/")),
                                                   part("observables/"))
        try:
            (y_final, result, stats), saved = in_cost_order(
                lambda d, y: self.kernel.run_host(self.member, d, y, self.batched, dest), self.member, dyn,
                np.asarray(y0s), self.batched, self.kernel.sort_by_cost)
        except Unfusable as e:
            self._fell_back(e)
            return self._run(dyn, jnp.asarray(y0s), Scan())
        return EnsembleOutput(y_final, saved, result, stats)

    def _run(self, dyn, y0s, kernel: AbstractKernel) -> EnsembleOutput:
        N = y0s.shape[0]
        block = kernel.members_per_block(N, self.platform, self.member.sorts)
        padded = -(-N // block) * block
        if padded != N:  # whole blocks, with copies of the members themselves
            idx = np.arange(padded) % N
            y0s = y0s[idx]
            dyn = jax.tree.map(lambda a: a[idx], dyn) if self.batched else dyn
        y_final, saved, result, stats = in_cost_order(
            lambda d, y: kernel.run(self.member, d, y, self.batched, block, self.platform), self.member, dyn,
            y0s, self.batched, kernel.sort_by_cost)
        return jax.tree.map(lambda a: a[:N], EnsembleOutput(y_final, saved, result, stats))
