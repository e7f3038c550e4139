r"""Stochastic Lie–Poisson systems (Stratonovich): a Lie–Poisson drift and Lie–Poisson noise.

``dμ = sign·ad*_{∂h/∂μ} μ dt + Σᵢ sign·ad*_{∂hᵢ/∂μ} μ ∘ dWᵢ`` (Holm 2015; Arnaudon, De Castro &
Holm 2018): each noise field is the Lie–Poisson vector field of its own Hamiltonian ``hᵢ``, in
the same bracket as the drift's, so every path stays on its coadjoint orbit: the Casimirs are
constants of every path. In coordinates the fields are ``Π(μ)∇h`` and ``Π(μ)∇hᵢ`` with
``Π(μ)_ij = sign Σ_k c_ij^k μ_k``. Linear noise ``hᵢ = ⟨μ, ξᵢ⟩`` has the field ``sign·Σ_jk
c_ijk μ_k ξ_j``, linear in μ: its flow is a coadjoint action ``exp(W ad*_ξ)``.

An optional double-bracket dissipation ``θ P(μ)P(μ)∇h`` (``P(μ)_ij = Σ_k c_ij^k μ_k``, ``θ ≥ 0``)
joins the drift: as ``P`` is skew and ``P(μ)∇C = 0`` for a Casimir ``C``, it keeps every Casimir
and lowers the energy at the rate ``θ|P∇h|²`` (on so(3)*: ``θ M × (M × Ω)``, Arnaudon, De Castro
& Holm's double bracket with the Casimir ½|M|²).
"""

from __future__ import annotations

from typing import Optional, Union, final

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._checks import is_traced
from ._base import AbstractLiePoissonSystem, AbstractSystem, LiePoissonSystem, compiled_method

__all__ = ["StochasticLiePoissonSystem"]


def _noise(noise, d: int, who: str):
    """``noise`` as a float array ``(m, d)`` of linear noise vectors, or a tuple of Hamiltonians."""
    if callable(noise):
        return (noise,)
    if isinstance(noise, (list, tuple)) and noise and all(callable(h) for h in noise):
        return tuple(noise)
    if isinstance(noise, (list, tuple)) and any(callable(h) for h in noise):
        raise TypeError(f"{who}: noise is either Hamiltonians (functions of μ) or vectors ξᵢ, not both")
    try:
        xi = jnp.asarray(noise) if isinstance(noise, jax.Array) else jnp.asarray(np.asarray(noise, dtype=float))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{who}: noise must be vectors ξᵢ (an array (m, {d})) or Hamiltonians hᵢ(μ), got "
                        f"{type(noise).__name__}") from e
    xi = xi[None, :] if xi.ndim == 1 else xi
    if xi.ndim != 2 or xi.shape[1] != d or xi.shape[0] < 1:
        raise ValueError(f"{who}: noise vectors must have shape (m, {d}) (or ({d},) for one), got {jnp.shape(noise)}")
    if not is_traced(xi) and not np.all(np.isfinite(np.asarray(xi))):
        raise ValueError(f"{who}: noise vectors must be finite")
    return xi


@final
class StochasticLiePoissonSystem(AbstractSystem):
    r"""A stochastic Lie–Poisson system in Stratonovich form (see the module):
    ``dμ = sign·ad*_{∂h/∂μ} μ dt + Σᵢ sign·ad*_{∂hᵢ/∂μ} μ ∘ dWᵢ``.

    Arguments:
        algebra: the Lie algebra 𝔤, or a deterministic Lie–Poisson system whose Hamiltonian,
            sign and Casimirs (and whose structure, such as a free rigid body's) the drift keeps:
            ``StochasticLiePoissonSystem(lpjax.systems.heavy_top(...), noise=xi)``.
        hamiltonian: ``h: 𝔤* -> R`` (with an algebra).
        noise: the noise Hamiltonians: vectors ``ξᵢ`` (an array ``(m, dim 𝔤)``, or one vector) for
            linear noise ``hᵢ = ⟨μ, ξᵢ⟩``, or functions ``hᵢ(μ)`` (a list, or one).
        sign: the bracket's sign, ``+1`` or ``−1`` (with an algebra).
        dissipation: ``θ ≥ 0`` of the double-bracket term ``θ P(μ)P(μ)∇h`` (None: none).
        casimirs, name: as for :class:`LiePoissonSystem` (with an algebra).

    :meth:`vector_field` is the drift (with the dissipation), :meth:`noise_fields` the ``m``
    noise fields; the Wiener processes are independent and standard.
    """

    drift: AbstractLiePoissonSystem
    noise: Union[Float[Array, "m d"], tuple]
    dissipation: Optional[Float[Array, ""]]

    def __init__(self, algebra, hamiltonian=None, noise=None, sign=None, dissipation=None, casimirs=None,
                 name: Optional[str] = None):
        who = "StochasticLiePoissonSystem"
        if isinstance(algebra, AbstractLiePoissonSystem):
            if hamiltonian is not None or sign is not None or casimirs is not None or name is not None:
                raise TypeError(f"{who}: from a system ({type(algebra).__name__}) the drift is that system's: pass no "
                                "hamiltonian, sign, casimirs or name")
            drift = algebra
        elif isinstance(algebra, AbstractSystem):
            raise TypeError(f"{who}: the drift must be a Lie–Poisson system, got {type(algebra).__name__}")
        else:
            drift = LiePoissonSystem(algebra, hamiltonian, sign, casimirs, name or who)
        if noise is None:
            raise TypeError(f"{who}: noise is required: vectors ξᵢ (an array (m, {drift.algebra.dim})) or "
                            "Hamiltonians hᵢ(μ)")
        if dissipation is not None:
            dissipation = jnp.asarray(dissipation, dtype=float)
            if dissipation.ndim != 0 or (not is_traced(dissipation) and not float(dissipation) >= 0):
                raise ValueError(f"{who}: dissipation must be a scalar θ ≥ 0, got {dissipation}")
        self.drift = drift
        self.noise = _noise(noise, drift.algebra.dim, who)
        self.dissipation = dissipation

    @property
    def algebra(self):
        return self.drift.algebra

    @property
    def sign(self) -> int:
        return int(self.drift.sign)

    @property
    def dim(self) -> int:
        return self.drift.algebra.dim

    @property
    def name(self) -> str:
        return f"stochastic {self.drift.name}"

    @property
    def n_noise(self) -> int:
        """``m``, the number of independent Wiener processes."""
        return len(self.noise) if isinstance(self.noise, tuple) else int(self.noise.shape[0])

    @property
    def linear_noise(self) -> Optional[Float[Array, "m d"]]:
        """The vectors ``ξᵢ`` of linear noise, or None for noise Hamiltonians."""
        return None if isinstance(self.noise, tuple) else self.noise

    def check_state(self, y: Array) -> None:
        self.drift.check_state(y)

    @compiled_method
    def energy(self, mu: Float[Array, " n"]) -> Scalar:
        return self.drift.energy(mu)

    @compiled_method
    def casimirs(self, mu: Float[Array, " n"]) -> Float[Array, " r"]:
        return self.drift.casimirs(mu)

    @property
    def casimir_names(self) -> tuple[str, ...]:
        return self.drift.casimir_names

    def _field(self, mu, grad, signed: bool = True):
        c = self.algebra.structure_constants
        w = sm.stack(sm.bilinear(c, sm.unstack(grad), sm.unstack(mu)))
        return self.sign * w if signed else w

    @compiled_method
    def vector_field(self, mu: Float[Array, " n"]) -> Float[Array, " n"]:
        """The drift: the Lie–Poisson field of ``h``, with the dissipation ``θ P(μ)P(μ)∇h``."""
        f = self.drift.vector_field(mu)
        if self.dissipation is None:
            return f
        return f + self.dissipation.astype(mu.dtype) * self._field(mu, self._field(mu, jax.grad(self.energy)(mu),
                                                                                      False), False)

    @compiled_method
    def noise_fields(self, mu: Float[Array, " n"]) -> Float[Array, "m n"]:
        """The ``m`` noise fields ``sign·ad*_{∂hᵢ/∂μ} μ``, one a row."""
        if isinstance(self.noise, tuple):
            return jnp.stack([self._field(mu, jax.grad(lambda m, h=h: jnp.asarray(h(m)))(mu)) for h in self.noise])
        return jnp.stack([self._field(mu, xi.astype(mu.dtype)) for xi in self.noise])

    def noise_generators(self, dtype=np.float64) -> Float[Array, "m n n"]:
        """Linear noise only: the matrices ``Aᵢ`` with ``Aᵢμ`` the ``i``-th noise field, so that
        its flow is ``μ(W) = exp(W Aᵢ) μ``."""
        xi = self.linear_noise
        if xi is None:
            raise ValueError(f"{self.name}: the noise is given by Hamiltonians, not by vectors ξᵢ: no linear generators")
        c = jnp.asarray(self.algebra.structure_constants, dtype)
        return self.sign * jnp.einsum("ijk,mj->mik", c, xi.astype(dtype))

