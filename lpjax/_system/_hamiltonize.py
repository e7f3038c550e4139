"""Chaplygin's reducing multiplier: the n-dimensional Veselova problem as a Hamiltonian system
on T*S^{n−1} after a change of time (seed 001, sec. 4; Fedorov & Jovanović 2004;
``docs/seeds/seed001-equations.md``, fact 6).

On the constraint the state is fixed by γ and γ' (Ω = γγ'ᵀ − γ'γᵀ, so that γ' = −Ωγ). In the
chart γ = (q, sqrt(1 − |q|²)) of the upper hemisphere the reduced Lagrangian is
``L = ½ q'ᵀ G(q) q' = ½⟨I(Ω), Ω⟩`` and ``p = G(q) q'``. With the multiplier
``ν = ρ_red^{1/(n−2)}``, ``ρ_red(q) = ρ(γ) / (γ_n² det G(q))`` (ρ the invariant density),
the new time ``dτ = ν dt`` and ``p̃ = ν p``, the motion in (q, p̃) is Hamiltonian with
``H̃(q, p̃) = ½ (p̃/ν)ᵀ G(q)⁻¹ (p̃/ν)`` (the energy): for n = 3 with any inertia and for n ≥ 4
when I(Ω) = AΩA. :func:`hamiltonize` checks this by the Hamiltonian defect
``|Y − J∇H̃| / |Y|`` of the true reduced field Y and refuses a system without a multiplier.
"""

from __future__ import annotations

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from ._base import CanonicalSystem
from ._nonholonomic import NonholonomicSystem

__all__ = ["Hamiltonized", "hamiltonize"]

_DEFECT_TOL = 1e-8


@final
class Hamiltonized(eqx.Module):
    """A Veselova-type system in canonical coordinates ``z = (q, p̃)`` on T*S^{n−1} with the
    time τ (``dτ = ν dt``). ``canonical`` is the :class:`lpjax.CanonicalSystem` to integrate
    (with a symplectic Gauss–Legendre method: the only truly symplectic route for these
    systems); ``to_canonical``/``from_canonical`` map states; :meth:`time` recovers t(τ)."""

    system: NonholonomicSystem

    @property
    def n(self) -> int:
        return self.system.n

    def _gamma(self, q: Float[Array, " k"]) -> Float[Array, " n"]:
        return jnp.concatenate([q, jnp.sqrt(1.0 - jnp.dot(q, q))[None]])

    def _velocity_map(self, q: Float[Array, " k"]) -> Float[Array, "d k"]:
        """``B(q)`` with ``Ω = B q'``: Ω = γγ'ᵀ − γ'γᵀ and γ' = (q', −qᵀq'/γ_n)."""
        g = self._gamma(q)
        C = jnp.concatenate([jnp.eye(q.shape[0], dtype=q.dtype), -(q / g[-1])[None, :]], axis=0)  # dγ/dq
        mats = g[None, :, None] * C.T[:, None, :] - C.T[:, :, None] * g[None, None, :]  # γ c_jᵀ − c_j γᵀ
        return self.system.algebra.vee(mats, check=False).T

    def _omega(self, q, qdot):
        return self._velocity_map(q) @ qdot

    def _x(self, q, Om):
        g = self._gamma(q)
        return jnp.concatenate([self.system.inertia_operator(g[None]) @ Om, g])

    def metric(self, q: Float[Array, " k"]) -> Float[Array, "k k"]:
        """``G(q) = Bᵀ I B``: the reduced kinetic energy is ``½ q'ᵀ G q'``."""
        B = self._velocity_map(q)
        return B.T @ self.system.inertia_operator(self._gamma(q)[None]) @ B

    def _nu(self, q):
        g = self._gamma(q)
        rho = self.system.density(jnp.concatenate([jnp.zeros(self.system.algebra.dim, q.dtype), g]))
        return (rho / (g[-1] ** 2 * jnp.linalg.det(self.metric(q)))) ** (1.0 / (self.n - 2))

    def multiplier(self, q: Float[Array, " k"]) -> Scalar:
        """``ν(q) ∝ (ρ(γ) / (γ_n² det G(q)))^{1/(n−2)}``, scaled to 1 at the pole q = 0 (any
        constant factor gives a Hamiltonian system; this one keeps τ ≈ t)."""
        return self._nu(q) / self._nu(jnp.zeros_like(q))

    def hamiltonian(self, z: Float[Array, " 2k"]) -> Scalar:
        k = self.n - 1
        q, pt = z[:k], z[k:]
        p = pt / self.multiplier(q)
        return 0.5 * jnp.dot(p, jnp.linalg.solve(self.metric(q), p))

    @property
    def canonical(self) -> CanonicalSystem:
        return CanonicalSystem(self.hamiltonian, self.n - 1, name=f"{self.system.name}, hamiltonized")

    def to_canonical(self, x: Float[Array, " m"]) -> Float[Array, " 2k"]:
        """``(q, p̃)`` of a state ``(M, γ)`` on the constraint with γ_n > 0, |γ| = 1."""
        _, gammas = self.system.split(x)
        g = gammas[0]
        Om = self.system.angular_velocity(x)
        gdot = -self.system.algebra.hat(Om) @ g
        q, qdot = g[:-1], gdot[:-1]
        return jnp.concatenate([q, self.multiplier(q) * self.metric(q) @ qdot])

    def from_canonical(self, z: Float[Array, " 2k"]) -> Float[Array, " m"]:
        k = self.n - 1
        q, pt = z[:k], z[k:]
        qdot = jnp.linalg.solve(self.metric(q), pt / self.multiplier(q))
        return self._x(q, self._omega(q, qdot))

    def time(self, zs: Float[Array, "T 2k"], dtau: float) -> Float[Array, " T"]:
        """t at each of the states ``zs`` saved every ``dtau`` of τ, by the trapezoidal rule on
        ``dt/dτ = 1/ν``."""
        inv = 1.0 / eqx.filter_jit(lambda h, zs: jax.vmap(lambda z: h.multiplier(z[: h.n - 1]))(zs))(self, jnp.asarray(zs))
        return jnp.concatenate([jnp.zeros(1, inv.dtype), jnp.cumsum(0.5 * dtau * (inv[1:] + inv[:-1]))])

    def defect(self, x: Float[Array, " m"]) -> Scalar:
        """``|Y − J∇H̃| / |Y|`` at ``x``: ``Y`` the true motion in (q, p̃) per unit τ."""
        z, zdot = jax.jvp(self.to_canonical, (x,), (self.system.vector_field(x),))
        Y = zdot / self.multiplier(z[: self.n - 1])
        return jnp.linalg.norm(Y - self.canonical.vector_field(z)) / jnp.linalg.norm(Y)

    def defects(self, xs: Float[Array, "b m"]) -> Float[Array, " b"]:
        """:meth:`defect` at each of the states ``xs``, compiled once per shape."""
        return _defects(self, jnp.asarray(xs))


@eqx.filter_jit
def _defects(h: Hamiltonized, xs):
    return jax.vmap(h.defect)(xs)


def hamiltonize(system: NonholonomicSystem, *, check_points: int = 8, seed: int = 0) -> Hamiltonized:
    """Chaplygin's reducing multiplier for a Veselova-type system (an LR constraint, no
    couplings): n = 3 with any inertia, n ≥ 4 with I(Ω) = AΩA. Raises ``ValueError`` when the
    Hamiltonian defect at ``check_points`` random states exceeds 1e-8, that is, when no such
    multiplier exists (a generic n = 4 rigid body: defect ~1e-3 to 1e-2). A rubber sphere:
    hamiltonize ``veselova_n`` with inertia I + D·1, which has the same trajectories."""
    if not isinstance(system, NonholonomicSystem) or not system.constrained or system.r != 1:
        raise ValueError("hamiltonize needs a Veselova-type NonholonomicSystem (an LR constraint, one γ)")
    if np.any(np.asarray(system.D) != 0) or np.any(np.asarray(system.T) != 0):
        raise ValueError(f"hamiltonize: {system.name} has a γ-dependent inertia; hamiltonize veselova/veselova_n "
                         "with inertia I + D·1 instead (same trajectories)")
    h = Hamiltonized(system)
    rng = np.random.default_rng(seed)
    xs = []
    for _ in range(check_points):
        g = rng.normal(size=system.n)
        g[-1] = abs(g[-1]) + 0.5
        g /= np.linalg.norm(g)
        Om = rng.normal(size=system.algebra.dim)
        xs.append(system.from_velocity(jnp.asarray(Om), jnp.asarray(g)))
    worst = float(jnp.max(h.defects(jnp.stack(xs))))
    if not worst <= _DEFECT_TOL:
        raise ValueError(f"hamiltonize: {system.name} (n = {system.n}) has no Chaplygin reducing multiplier of this "
                         f"form: Hamiltonian defect {worst:.2e} > {_DEFECT_TOL:g} (a multiplier exists for n = 3, and "
                         "for n >= 4 with I(Ω) = AΩA)")
    return h
