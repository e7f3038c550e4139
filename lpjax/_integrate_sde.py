""":func:`lpjax.integrate` for a stochastic Lie–Poisson system: fixed steps, each with its Wiener
increments, drawn from a counter-based key or read from a Brownian path.

* ``key=``: the increments of step ``n`` are ``√dt z``, ``z`` standard normals from the
  Threefry block of the key at the counter ``n`` (:mod:`lpjax._noise`): any step's increments
  are known without the others, and member ``j`` of an ensemble run with ``key`` is this run
  with ``jax.random.fold_in(key, j)``.
* ``brownian=``: any diffrax ``AbstractBrownianPath`` (such as ``VirtualBrownianTree``) of shape
  ``(m,)``: the increments are ``W((n + 1)dt) − W(n dt)``, so that one path can be run at several
  step sizes (convergence studies).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._checks import is_traced, run_inputs
from ._adjoint import loop
from ._integrator import RESULTS
from ._member import innermost, the_state
from ._noise import key_words
from ._schedule import fixed_schedule
from ._solution import Solution
from ._stochastic_member import StochasticMember

__all__ = ["integrate_sde"]


def integrate_sde(system, method, y0, dt, n_steps, save_every, throw: bool, dtype, brownian, key, adjoint: str,
                  extras: dict):
    """The stochastic branch of :func:`lpjax.integrate` (see there, and the module); ``extras``:
    the options it refuses, by name."""
    given = [name for name, v in extras.items() if v is not None]
    if given or isinstance(y0, Solution):
        given += ["a Solution as y0"] if isinstance(y0, Solution) else []
        raise ValueError(f"integrate: a stochastic run has fixed steps from t = 0; it takes no {', '.join(given)}")
    if adjoint not in ("auto", "direct", "discrete"):
        raise ValueError(f"integrate: adjoint must be 'auto', 'direct' or 'discrete', got {adjoint!r}")
    y0, rdtype, (system, method) = run_inputs(y0, dtype, (system, method), "integrate")
    save_every = 1 if save_every is None else save_every
    fixed_schedule(dt, n_steps, save_every, "integrate")
    method.check_system(system)
    system.check_state(y0)
    if brownian is not None:
        m, shape = system.n_noise, jax.eval_shape(lambda: brownian.evaluate(0.0, dt)).shape
        if shape != (m,):
            raise ValueError(f"integrate: the Brownian path's increments have shape {shape}, the system's {m} noise "
                             f"fields need ({m},)")
    dyn, static = eqx.partition(system, eqx.is_array)
    member = StochasticMember(static, method, jnp.asarray(dt, rdtype), int(n_steps), int(save_every), the_state,
                              None if key is None else key_words(key), True, False, brownian)
    traced = any(is_traced(a) for a in jax.tree.leaves(eqx.filter((dyn, y0, dt, member), eqx.is_array)))
    ys, carry = _run(member, dyn, y0, adjoint == "discrete")
    _, _, stats = member.summary(dyn, carry)
    base = innermost(carry)
    if throw and traced:
        ys = base.result.error_if(ys, base.result != RESULTS.successful)
    ts = jnp.asarray(dt, rdtype) * save_every * jnp.arange(int(n_steps) // int(save_every) + 1, dtype=rdtype)
    if throw and not traced and base.result != RESULTS.successful:
        raise RuntimeError(f"integrate: {RESULTS[base.result]} (throw=False returns the solution with its result code)")
    return Solution(ts=ts, ys=ys, result=base.result, stats=stats, state=base.state)


@eqx.filter_jit
def _run(member, dyn, y0, discrete: bool):
    """``(states at the saves, the member's carry at the end)`` of ``member`` from ``y0``: each
    save ``save_every`` steps in a :func:`lpjax._adjoint.loop`, as the deterministic
    ``integrate`` runs them, so that reverse mode keeps O(√n) carries; ``discrete``: the loops'
    discrete adjoint (reverse mode only), else JAX differentiates them."""
    arrays, static = eqx.partition(member, eqx.is_array)  # (the loops take every array as an input: no closure)

    def one_step(both, carry):
        return eqx.combine(both[1], static).step(both[0], carry), None

    def one_save(both, carry):
        carry, _ = loop(one_step, both, carry, member.save_every, discrete and member.save_every >= 16)
        return carry, eqx.combine(both[1], static).observe(both[0], carry)

    start = member.init(dyn, y0)
    carry, saved = loop(one_save, (dyn, arrays), start, member.n_steps // member.save_every,
                        discrete and member.save_every < 16)
    return jnp.concatenate([member.observe(dyn, start)[None], saved]), carry
