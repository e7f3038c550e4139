"""The discrete adjoint of one Gauss–Legendre step, for reverse-mode gradients.

A step solves ``R(Z) = Z − dt (A ⊗ I) F(y + Z) = 0`` for the stage increments and returns
``y₁ = y + δ (+ the compensation c)`` with ``δ = dt Σ_j b_j F_j`` and the next step's predicted
stages ``Z₁ = E Z − δ``. Given the cotangents ``(ȳ₁, Z̄₁)`` of the new state, the adjoint stage
equations (the transposed linearised stage system) are

    Λ_j = dt J_jᵀ μ_j + (EᵀZ̄₁)_j,   μ_j = b_j δ̄ + Σ_i a_ij Λ_i,   δ̄ = ȳ₁ − Σ_j Z̄₁_j,

with ``J_j = f'(y + Z_j)`` at the converged stages. Then ``ȳ = ȳ₁ + Σ_j (Λ_j − (EᵀZ̄₁)_j)``,
``c̄ = ȳ₁``, and the parameters and ``dt`` get ``Σ_j (∂(dt f(Y_j; θ))/∂(θ, dt))ᵀ μ_j``. The
prediction ``Z`` entering the step is only the solve's starting point: no cotangent.

For ``solver="fixed_point"`` the adjoint equations are solved by the same fixed-point iteration
as the stages (their contraction is the same, ``dt ‖J‖ ‖A‖``), with the same test and the same
iteration limit; for ``"newton"`` and ``"auto"`` by a dense solve of the transposed
``sn × sn`` matrix. The Jacobians are formed once per stage (``n`` Jacobian–vector products):
iterating with matrices is cheaper on a CPU than repeating vector–Jacobian products.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _small as sm
from ._implicit import fixed_point

__all__ = ["stage_vjp", "stage_parameter_vjp"]


def _transpose_combine(W: np.ndarray, X):
    """``Wᵀ X`` for a constant matrix ``W`` (rows of ``X`` are stage vectors), unrolled."""
    return jnp.stack([sum(float(W[i, j]) * X[i] for i in range(W.shape[0])) for j in range(W.shape[1])])


def stage_vjp(method, system, dt, state, Z, ct, jacobian):
    """``(ct_state, seed, converged)`` for the step from ``state`` with converged increments
    ``Z`` and the new state's cotangent ``ct`` (see the module docstring); ``seed`` is what
    :func:`stage_parameter_vjp` needs for the step's parameter cotangents."""
    A, b, _ = method.tableau
    E = method.tableau_extrapolation
    s = method.stages
    dyn, static = eqx.partition(system, eqx.is_inexact_array)

    def f(d, Y):
        return eqx.combine(d, static).vector_field(Y)

    Y = state.y[None, :] + Z
    J = [jacobian(lambda x: f(dyn, x), Y[j]) for j in range(s)]
    ybar1, Zbar1 = ct.y, ct.Z
    dbar = ybar1 - jnp.sum(Zbar1, axis=0)
    cZ = _transpose_combine(E, Zbar1)

    def mu_of(Lam):
        return [b[j] * dbar + sum(float(A[i, j]) * Lam[i] for i in range(s)) for j in range(s)]

    def T(Lam):
        mu = mu_of(Lam)
        return jnp.stack([dt * jnp.sum(J[j] * mu[j][:, None], axis=0) for j in range(s)]) + cZ

    if method.solver == "fixed_point":
        Lam, ok = fixed_point(T, T(jnp.zeros_like(Z)), max_iters=method.max_iters, tol=method.tol,
                              early_exit=method.early_exit, scale=jnp.abs(ybar1)[None, :])
    else:  # (I − dt [a_ij J_j])ᵀ Λ = rhs, densely
        n = Z.shape[1]
        M = jnp.eye(s * n, dtype=Z.dtype) - dt * jnp.block([[float(A[i, j]) * J[j] for j in range(s)] for i in range(s)])
        Lam = sm.solve_small(M.T, T(jnp.zeros_like(Z)).reshape(-1), pivot=True).reshape(Z.shape)
        ok = jnp.all(jnp.isfinite(Lam))
    ybar = ybar1 + jnp.sum(Lam - cZ, axis=0)
    ct_state = type(state)(ybar, jnp.zeros_like(state.Z), ybar1)
    return ct_state, (Y, jnp.stack(mu_of(Lam))), ok


def stage_parameter_vjp(system, dt, seed):
    """The cotangents ``(system's inexact arrays, dt)`` of one step from its ``seed = (Y, μ)``:
    ``Σ_j (∂(dt f(Y_j; θ))/∂(θ, dt))ᵀ μ_j`` (formed for many steps at once, under ``vmap``)."""
    Y, mu = seed
    dyn, static = eqx.partition(system, eqx.is_inexact_array)

    def fields(d, dt):
        return dt * jnp.stack([eqx.combine(d, static).vector_field(Y[j]) for j in range(Y.shape[0])])

    return jax.vjp(fields, dyn, dt)[1](mu)
