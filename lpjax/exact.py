"""Closed-form solutions: the free rigid body (Euler top).

Pure NumPy/SciPy, no JAX, independent of the integrators: use it to measure their
error (the tests and ``benchmarks/rigid_body.py`` do)::

    from lpjax.exact import euler_top_exact
    M = euler_top_exact((1.0, 2.0, 3.0), (1.0, 0.5, 0.8), ts)   # shape ts.shape + (3,)

Equations (body frame)::

    dM/dt = M x Omega,     Omega = I^{-1} M,     I = diag(I1, I2, I3)

i.e. ``I1 dOmega1/dt = (I2 - I3) Omega2 Omega3`` and cyclic.  Conserved:
energy ``E = 1/2 M.Omega`` and Casimir ``D = |M|^2``.

Closed form (Landau & Lifshitz, Mechanics, Sec. 37).  Label the axes (a, b, c)
with b the middle moment of inertia and c the axis about which the body
"rotates" (M_c never vanishes):

* ``D > 2 E I_mid``: c = axis of largest inertia, a = smallest;
* ``D < 2 E I_mid``: c = axis of smallest inertia, a = largest.

Then, with every ratio below positive in both regimes::

    Omega_a =      A_a cn(tau),   A_a^2 = (2E I_c - D) / (I_a (I_c - I_a))
    Omega_b = s_b  A_b sn(tau),   A_b^2 = (2E I_c - D) / (I_b (I_c - I_b))
    Omega_c = s_c  A_c dn(tau),   A_c^2 = (D - 2E I_a) / (I_c (I_c - I_a))
    tau     = lam * t + u0,       lam^2 = (I_c - I_b)(D - 2E I_a) / (I_a I_b I_c)
    k^2     = (I_b - I_a)(2E I_c - D) / ((I_c - I_b)(D - 2E I_a))

In the relabelled frame the equations read ``dM'/dt = sigma M' x Omega'``
where ``sigma = +1/-1`` is the parity of the permutation (a, b, c) of
(0, 1, 2) (an odd relabelling flips the orientation, i.e. time).  Plugging
the ansatz in gives ``s_b = sigma * sign(I_c - I_a) * s_c`` and we take
``s_c = sign(M_c(0))``.  The phase ``u0`` is the incomplete elliptic integral
``F(phi0 | k^2)`` with ``phi0 = atan2(sn, cn)`` taken over the full period
(``phi0`` in (-pi, pi]).  The combinations ``2E I_c - D`` etc. are evaluated
as sums of non-negative terms to avoid cancellation.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ellipj, ellipk, ellipkinc

__all__ = ["euler_top_exact", "euler_top_period", "euler_top_energy_casimir"]

_SEPARATRIX_RTOL = 1e-12
_DISTINCT_RTOL = 1e-12


def _validate(inertia, M0):
    inertia = np.asarray(inertia, dtype=np.float64)
    M0 = np.asarray(M0, dtype=np.float64)
    if inertia.shape != (3,):
        raise ValueError(f"inertia must have shape (3,), got {inertia.shape}")
    if M0.shape != (3,):
        raise ValueError(f"M0 must have shape (3,), got {M0.shape}")
    if not np.all(np.isfinite(inertia)):
        raise ValueError(f"inertia must be finite, got {inertia}")
    if not np.all(np.isfinite(M0)):
        raise ValueError(f"M0 must be finite, got {M0}")
    if np.any(inertia <= 0.0):
        raise ValueError(f"inertia must be strictly positive, got {inertia}")
    scale = np.max(inertia)
    for i in range(3):
        for j in range(i + 1, 3):
            if abs(inertia[i] - inertia[j]) <= _DISTINCT_RTOL * scale:
                raise ValueError(
                    "inertia must have three distinct principal moments "
                    f"(I{i + 1} == I{j + 1} in {inertia}); the symmetric top "
                    "is not handled by this reference"
                )
    return inertia, M0


def euler_top_energy_casimir(inertia, M):
    """Energy ``1/2 sum M_i^2 / I_i`` and Casimir ``|M|^2`` (last axis = 3)."""
    inertia = np.asarray(inertia, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    return 0.5 * np.sum(M * M / inertia, axis=-1), np.sum(M * M, axis=-1)


def _setup(inertia, M0):
    """Return the parameters of the closed form, or None for M0 == 0."""
    inertia, M0 = _validate(inertia, M0)
    M2 = M0 * M0
    D = float(np.sum(M2))
    if D == 0.0:
        return inertia, M0, None

    order = np.argsort(inertia)
    lo, mid, hi = (int(i) for i in order)
    # D - 2E I_mid = sum_i M_i^2 (I_i - I_mid) / I_i
    sep = float(np.sum(M2 * (inertia - inertia[mid]) / inertia))
    two_e_imid = float(np.sum(M2 * inertia[mid] / inertia))
    if abs(sep) <= _SEPARATRIX_RTOL * max(D, two_e_imid):
        raise ValueError(
            "initial condition lies on the separatrix |M|^2 == 2 E I_mid "
            f"(relative gap {abs(sep) / max(D, two_e_imid):.3e} <= "
            f"{_SEPARATRIX_RTOL:g}); the motion is not periodic there"
        )
    if sep > 0.0:
        a, b, c = lo, mid, hi
    else:
        a, b, c = hi, mid, lo
    Ia, Ib, Ic = inertia[a], inertia[b], inertia[c]

    # 2E I_c - D = sum_{i != c} M_i^2 (I_c - I_i)/I_i  (divided by sign, >= 0)
    # D - 2E I_a = sum_{i != a} M_i^2 (I_i - I_a)/I_i  (divided by sign, >= 0)
    sgn = np.sign(Ic - Ia)  # +1 in the M^2 > 2E I_mid regime, -1 otherwise
    p = float(np.sum(M2 * (Ic - inertia) / inertia)) * sgn  # |2E Ic - D|
    q = float(np.sum(M2 * (inertia - Ia) / inertia)) * sgn  # |D - 2E Ia|
    p = max(p, 0.0)
    q = max(q, 0.0)

    Aa = np.sqrt(p / (Ia * (Ic - Ia) * sgn))
    Ab = np.sqrt(p / (Ib * (Ic - Ib) * sgn))
    Ac = np.sqrt(q / (Ic * (Ic - Ia) * sgn))
    lam = np.sqrt((Ic - Ib) * sgn * q / (Ia * Ib * Ic))
    m = (Ib - Ia) * sgn * p / ((Ic - Ib) * sgn * q)  # k^2, in [0, 1)
    m = min(max(m, 0.0), 1.0)
    # Complementary parameter 1 - k^2 = (I_c - I_a)(D - 2E I_b) / ((I_c - I_b)(D - 2E I_a)),
    # evaluated without cancellation (accurate close to the separatrix).
    m1 = (Ic - Ia) * sep / ((Ic - Ib) * sgn * q)
    m1 = min(max(m1, 0.0), 1.0)

    # Orientation: parity of the relabelling (a, b, c).
    sigma = 1.0 if (a, b, c) in ((0, 1, 2), (1, 2, 0), (2, 0, 1)) else -1.0
    Om0 = M0 / inertia
    s_c = 1.0 if Om0[c] >= 0.0 else -1.0  # Omega_c never vanishes
    s_b = sigma * sgn * s_c

    # Phase: cn(u0) = Omega_a/A_a, sn(u0) = Omega_b/(s_b A_b), over full period.
    cn0 = Om0[a] / Aa if Aa > 0.0 else 1.0
    sn0 = Om0[b] / (s_b * Ab) if Ab > 0.0 else 0.0
    phi0 = np.arctan2(sn0, cn0)  # in (-pi, pi]
    u0 = float(ellipkinc(phi0, m))

    params = dict(
        a=a, b=b, c=c, Aa=Aa, Ab=Ab, Ac=Ac, lam=lam, m=m, m1=m1, u0=u0,
        K=float(ellipk(m)), s_b=s_b, s_c=s_c,
    )
    return inertia, M0, params


def _jacobi_sn_cn_dn(u, m, m1, K):
    """sn, cn, dn with argument reduction to [-K, K].

    ``scipy.special.ellipj`` loses accuracy for large arguments (identities
    violated at the 1e-12 level for |u| ~ 300), so reduce with the 4K period
    and the half-period symmetry ``sn(u + 2K) = -sn u, cn(u + 2K) = -cn u,
    dn(u + 2K) = dn u`` first.  ``dn`` is recomputed as
    ``sqrt(cn^2 + (1 - m) sn^2)`` (a sum of non-negative terms) so that the
    conserved quantities hold to rounding.
    """
    u = np.asarray(u, dtype=np.float64)
    u = u - (4.0 * K) * np.round(u / (4.0 * K))  # now in [-2K, 2K]
    flip = np.abs(u) > K
    u = np.where(flip, u - np.copysign(2.0 * K, u), u)  # now in [-K, K]
    sn, cn, _, _ = ellipj(u, m)
    sgn = np.where(flip, -1.0, 1.0)
    sn = sgn * sn
    cn = sgn * cn
    dn = np.sqrt(cn * cn + m1 * sn * sn)
    return sn, cn, dn


def euler_top_exact(inertia, M0, t):
    """Exact body angular momentum ``M(t)`` of the free rigid body.

    Parameters
    ----------
    inertia : array_like, shape (3,)
        Distinct, positive principal moments of inertia, any order.
    M0 : array_like, shape (3,)
        Initial body angular momentum (any value off the separatrix).
    t : array_like
        Times (any sign); shape ``(n,)`` gives an output of shape ``(n, 3)``.

    Returns
    -------
    ndarray, shape ``np.shape(t) + (3,)``

    Raises
    ------
    ValueError
        Non-positive or non-distinct inertia, bad shapes, non-finite values, or
        ``|M0|^2 == 2 E I_mid`` within a relative tolerance of 1e-12.
    """
    inertia, M0, prm = _setup(inertia, M0)
    t = np.asarray(t, dtype=np.float64)
    out = np.zeros(t.shape + (3,), dtype=np.float64)
    if prm is None:  # M0 == 0 stays at rest
        return out
    tau = prm["lam"] * t + prm["u0"]
    sn, cn, dn = _jacobi_sn_cn_dn(tau, prm["m"], prm["m1"], prm["K"])
    a, b, c = prm["a"], prm["b"], prm["c"]
    out[..., a] = inertia[a] * prm["Aa"] * cn
    out[..., b] = inertia[b] * prm["s_b"] * prm["Ab"] * sn
    out[..., c] = inertia[c] * prm["s_c"] * prm["Ac"] * dn
    return out


def euler_top_period(inertia, M0):
    """Period ``4 K(k^2) / lambda`` of the body-frame motion ``M(t)``.

    (For an initial condition exactly on a principal axis the motion is
    stationary and this returns the formal value ``2 pi / lambda``.)
    """
    _, _, prm = _setup(inertia, M0)
    if prm is None:
        raise ValueError("M0 == 0: the body is at rest, the period is undefined")
    return float(4.0 * ellipk(prm["m"]) / prm["lam"])
