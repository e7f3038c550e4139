"""The discrete adjoint of one Gauss–Legendre step, for reverse-mode gradients.

A step solves ``R(Z) = Z − dt (A ⊗ I) F(y + Z) = 0`` for the stage increments and returns
``y₁ = y + δ (+ the compensation c)`` with ``δ = dt Σ_j b_j F_j`` and the next step's predicted
stages ``Z₁ = E Z − δ``. Given the cotangents ``(ȳ₁, Z̄₁)`` of the new state, the adjoint stage
equations (the transposed linearised stage system) are

    Λ_j = dt J_jᵀ μ_j + (EᵀZ̄₁)_j,   μ_j = b_j δ̄ + Σ_i a_ij Λ_i,   δ̄ = ȳ₁ − Σ_j Z̄₁_j,

with ``J_j = f'(y + Z_j)`` at the converged stages. Then ``ȳ = ȳ₁ + Σ_j (Λ_j − (EᵀZ̄₁)_j)``,
``c̄ = ȳ₁``, and the parameters and ``dt`` get ``Σ_j (∂(dt f(Y_j; θ))/∂(θ, dt))ᵀ μ_j``. The
prediction ``Z`` entering the step is only the solve's starting point: no cotangent.

The adjoint equations are solved by 8 fixed-point updates written out (their contraction is
the stages', ``dt ‖J‖ ‖A‖``), from ``Λ = T(0)``, accepted by the implicit kernel's test (the
error estimated from the last two updates ≤ ``tol``). A group with a step that fails the test
is redone with the robust solve (``robust=True``): Gauss–Jordan elimination of the transposed
``sn × sn`` matrix up to ``s·n = 32``, LU above; exact, stiff or not. The Jacobians are formed
for a whole checkpoint group at once, before the sweep (:func:`stage_linearize`, ``n``
Jacobian–vector products per stage, under ``vmap``). Measured on the heavy top (GL4, 10⁴
steps, CPU; gradient over forward, all arrays and y0), one variant at a time: 4.1 with the
Jacobians formed in the sweep, about 4.0 batched, 3.8 when the recompute also skips the
statistics; 5.8 with a ``while_loop`` fixed point per step, 4.2 with the elimination every
step, 7.4 with vector–Jacobian products in place of the Jacobians, 4.3 with the stage system
assembled into one ``sn × sn`` matrix per step (``c + KΛ`` by matrix products: fewer operations,
more kernels).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _small as sm
from ._implicit import default_tol

__all__ = ["stage_vjp", "stage_parameter_vjp"]

_DENSE = 32  # the robust solve: Gauss–Jordan elimination up to this many unknowns (s·n), LU above
_UNROLLED = 8  # fixed-point updates of the adjoint equations written out, before the convergence test


def _estimate(a, b, c, scale):
    """The error left in ``c`` after the updates ``a → b → c``, as the implicit kernel estimates
    it: ``θ/(1 − θ)·e`` with ``e`` the relative size of the last update and ``θ`` the observed
    contraction (``e`` itself when ``θ ≥ ½``); infinite for a non-finite iterate."""
    ref = 1.0 + jnp.maximum(jnp.abs(c), scale)
    e = jnp.max(jnp.abs(c - b) / ref)
    e_prev = jnp.max(jnp.abs(b - a) / ref)
    theta = jnp.where(e_prev > 0, e / e_prev, 0.0)
    return jnp.where(theta < 0.5, e * theta / (1 - theta), e) + jnp.where(jnp.isfinite(e), 0.0, jnp.inf)


def _transpose_combine(W: np.ndarray, X):
    """``Wᵀ X`` for a constant matrix ``W`` (rows of ``X`` are stage vectors), unrolled."""
    return jnp.stack([sum(float(W[i, j]) * X[i] for i in range(W.shape[0])) for j in range(W.shape[1])])


def stage_linearize(system, state, Z):
    """``(Y, J)``: the stage values ``Y_j = y + Z_j`` of the step from ``state`` with converged
    increments ``Z``, and the field's Jacobians ``J_j = f'(Y_j)`` there (for many steps at once)."""
    Y = state.y[None, :] + Z
    return Y, jnp.stack([jax.jacfwd(system.vector_field)(Y[j]) for j in range(Y.shape[0])])


def stage_vjp(method, dt, state, linearization, ct, robust: bool):
    """``(ct_state, seed, converged)`` for the step from ``state`` linearized by
    :func:`stage_linearize` and the new state's cotangent ``ct`` (see the module docstring);
    ``seed`` is what :func:`stage_parameter_vjp` needs for the step's parameter cotangents."""
    A, b, _ = method.tableau
    E = method.tableau_extrapolation
    s = method.stages
    Y, J = linearization
    ybar1, Zbar1 = ct.y, ct.Z
    dbar = ybar1 - jnp.sum(Zbar1, axis=0)
    cZ = _transpose_combine(E, Zbar1)

    def mu_of(Lam):
        return [b[j] * dbar + sum(float(A[i, j]) * Lam[i] for i in range(s)) for j in range(s)]

    def T(Lam):
        mu = mu_of(Lam)
        return jnp.stack([dt * jnp.sum(J[j] * mu[j][:, None], axis=0) for j in range(s)]) + cZ

    if robust:  # (I − dt [a_ij J_j])ᵀ Λ = T(0), densely
        n = Y.shape[1]
        M = jnp.eye(s * n, dtype=Y.dtype) - dt * jnp.block([[float(A[i, j]) * J[j] for j in range(s)] for i in range(s)])
        rhs = T(jnp.zeros_like(Y)).reshape(-1, 1)
        Lam = (sm.gauss_jordan(M.T, rhs) if s * n <= _DENSE else jnp.linalg.solve(M.T, rhs)).reshape(Y.shape)
        ok = jnp.all(jnp.isfinite(Lam))
    else:
        tol = default_tol(Y.dtype) if method.tol is None else method.tol
        iterates = [T(jnp.zeros_like(Y))]
        for _ in range(_UNROLLED):  # written out: a while_loop per step costs more than the updates
            iterates.append(T(iterates[-1]))
        Lam = iterates[-1]
        ok = _estimate(*iterates[-3:], jnp.abs(ybar1)[None, :]) <= tol
    ybar = ybar1 + jnp.sum(Lam - cZ, axis=0)
    ct_state = type(state)(ybar, jnp.zeros_like(state.Z), ybar1)
    return ct_state, (Y, jnp.stack(mu_of(Lam))), ok


def stage_parameter_vjp(system, dt, seed):
    """The cotangents ``(system's inexact arrays, method's (none), dt)`` of one step from its ``seed = (Y, μ)``:
    ``Σ_j (∂(dt f(Y_j; θ))/∂(θ, dt))ᵀ μ_j`` (formed for many steps at once, under ``vmap``)."""
    Y, mu = seed
    dyn, static = eqx.partition(system, eqx.is_inexact_array)

    def fields(d, dt):
        return dt * jnp.stack([eqx.combine(d, static).vector_field(Y[j]) for j in range(Y.shape[0])])

    ct_system, ct_dt = jax.vjp(fields, dyn, dt)[1](mu)
    return ct_system, None, ct_dt
