"""Pin the closed-form Euler-top reference against outside references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from tests.reference import (
    euler_top_energy_casimir,
    euler_top_exact,
    euler_top_period,
)

T_END = 100.0
T = np.linspace(0.0, T_END, 1001)


def _rhs(inertia):
    inertia = np.asarray(inertia, dtype=np.float64)

    def f(_t, M):
        return np.cross(M, M / inertia)

    return f


def _dop853(inertia, M0, t):
    sol = solve_ivp(
        _rhs(inertia),
        (t[0], t[-1]),
        np.asarray(M0, dtype=np.float64),
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
        t_eval=t,
    )
    assert sol.success, sol.message
    return sol.y.T


def _sep_gap(inertia, M0):
    """Signed relative gap (|M|^2 - 2 E I_mid) / |M|^2."""
    E, D = euler_top_energy_casimir(inertia, M0)
    return (D - 2.0 * E * np.sort(inertia)[1]) / D


def _random_case(seed, regime, inertia=None):
    """Random inertia / M0 with sign(|M|^2 - 2E I_mid) == regime, 5% off the separatrix."""
    rng = np.random.default_rng(seed)
    while True:
        I = (
            np.asarray(inertia, dtype=np.float64)
            if inertia is not None
            else rng.permutation(np.sort(rng.uniform(0.5, 3.0, size=3)))
        )
        if np.min(np.abs(np.diff(np.sort(I)))) < 0.2:
            continue
        M0 = rng.normal(size=3) * rng.uniform(0.3, 2.0)
        gap = _sep_gap(I, M0)
        if np.sign(gap) == regime and abs(gap) > 0.05:
            return I, M0


CASES = [
    # explicit non-sorted orderings in both regimes
    _random_case(1, +1, (3.0, 1.0, 2.0)),
    _random_case(2, -1, (3.0, 1.0, 2.0)),
    _random_case(3, +1, (1.0, 3.0, 2.0)),  # odd permutation of sorted
    _random_case(4, -1, (2.0, 1.0, 3.0)),  # odd permutation of sorted
    _random_case(5, +1, (1.0, 2.0, 3.0)),
    _random_case(6, -1, (1.0, 2.0, 3.0)),
    # fully random inertias (random order)
    _random_case(7, +1),
    _random_case(8, -1),
    _random_case(9, +1),
    _random_case(10, -1),
]
IDS = [f"I={'-'.join(f'{x:.2f}' for x in c[0])}-{'above' if _sep_gap(*c) > 0 else 'below'}" for c in CASES]


def test_cases_cover_both_regimes_and_unsorted_inertia():
    gaps = [_sep_gap(*c) for c in CASES]
    assert any(g > 0 for g in gaps) and any(g < 0 for g in gaps)
    assert any(np.any(np.diff(c[0]) < 0) for c in CASES)


@pytest.mark.parametrize("inertia,M0", CASES, ids=IDS)
def test_matches_dop853(inertia, M0):
    exact = euler_top_exact(inertia, M0, T)
    assert exact.shape == (T.size, 3)
    num = _dop853(inertia, M0, T)
    err = np.max(np.abs(exact - num))
    assert err <= 1e-9, err


@pytest.mark.parametrize("inertia,M0", CASES, ids=IDS)
def test_initial_value_and_negative_time(inertia, M0):
    np.testing.assert_allclose(euler_top_exact(inertia, M0, [0.0])[0], M0, rtol=0, atol=1e-14)
    # Backward in time against DOP853 as well.
    tb = np.linspace(0.0, -20.0, 201)
    err = np.max(np.abs(euler_top_exact(inertia, M0, tb) - _dop853(inertia, M0, tb)))
    assert err <= 1e-10, err


@pytest.mark.parametrize("inertia,M0", CASES, ids=IDS)
def test_conserves_energy_and_casimir(inertia, M0):
    E0, D0 = euler_top_energy_casimir(inertia, M0)
    M = euler_top_exact(inertia, M0, np.linspace(-T_END, T_END, 4001))
    E, D = euler_top_energy_casimir(inertia, M)
    assert np.max(np.abs(E - E0)) / E0 <= 1e-13
    assert np.max(np.abs(D - D0)) / D0 <= 1e-13


@pytest.mark.parametrize("inertia,M0", CASES, ids=IDS)
def test_period(inertia, M0):
    P = euler_top_period(inertia, M0)
    assert np.isfinite(P) and P > 0
    M = euler_top_exact(inertia, M0, np.array([P, 2 * P, -P]))
    assert np.max(np.abs(M - M0)) <= 1e-10
    # It is the minimal period: M does not return at P/2 (components a, b flip).
    assert np.max(np.abs(euler_top_exact(inertia, M0, [0.5 * P])[0] - M0)) > 1e-3


def test_period_matches_numerical_return_time():
    inertia, M0 = CASES[0]
    P = euler_top_period(inertia, M0)
    M_num = _dop853(inertia, M0, np.array([0.0, P]))[-1]
    assert np.max(np.abs(M_num - M0)) <= 1e-10


@pytest.mark.parametrize("regime", [+1, -1])
def test_axis_permutation_equivariance(regime):
    """Relabel axes by P: N = P M solves Euler with P I in time det(P) t."""
    inertia, M0 = _random_case(42, regime)
    t = np.linspace(-10.0, 10.0, 101)
    base = euler_top_exact(inertia, M0, t)
    for perm in itertools.permutations(range(3)):
        perm = list(perm)
        parity = np.linalg.det(np.eye(3)[perm])
        got = euler_top_exact(inertia[perm], M0[perm], parity * t)
        np.testing.assert_allclose(got, base[:, perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "M0",
    [
        (1.0, 0.0, 0.5),  # phase exactly 0
        (-1.0, 0.0, 0.5),  # phase exactly pi
        (0.0, 1.0, 2.0),  # M_a == 0
        (0.3, 0.0, -2.0),  # negative rotation-axis component
        (0.0, 0.0, 1.3),  # steady rotation about major axis
        (0.7, 0.0, 0.0),  # steady rotation about minor axis
    ],
)
def test_special_initial_conditions(M0):
    inertia = np.array([1.0, 2.0, 3.0])
    t = np.linspace(0.0, 30.0, 301)
    err = np.max(np.abs(euler_top_exact(inertia, M0, t) - _dop853(inertia, M0, t)))
    assert err <= 1e-10, err


def test_zero_momentum_is_rest():
    assert np.all(euler_top_exact((1.0, 2.0, 3.0), (0.0, 0.0, 0.0), T) == 0.0)
    with pytest.raises(ValueError, match="rest"):
        euler_top_period((1.0, 2.0, 3.0), (0.0, 0.0, 0.0))


@pytest.mark.parametrize(
    "inertia,M0,match",
    [
        ((1.0, 2.0, 2.0), (1.0, 0.5, 0.2), "distinct"),
        ((2.0, 2.0 * (1 + 1e-14), 3.0), (1.0, 0.5, 0.2), "distinct"),
        ((0.0, 2.0, 3.0), (1.0, 0.5, 0.2), "positive"),
        ((-1.0, 2.0, 3.0), (1.0, 0.5, 0.2), "positive"),
        ((1.0, 2.0, 3.0), (0.0, 1.0, 0.0), "separatrix"),  # unstable middle axis
        ((1.0, 2.0, 3.0), (1.0, 0.0, np.sqrt(3.0)), "separatrix"),  # M3^2 = 3 M1^2
        ((1.0, 2.0), (1.0, 0.5, 0.2), "shape"),
        ((1.0, 2.0, 3.0), (1.0, 0.5), "shape"),
        ((1.0, 2.0, np.nan), (1.0, 0.5, 0.2), "finite"),
        ((1.0, 2.0, 3.0), (1.0, np.inf, 0.2), "finite"),
    ],
)
def test_bad_inputs_raise(inertia, M0, match):
    with pytest.raises(ValueError, match=match):
        euler_top_exact(inertia, M0, T)
    with pytest.raises(ValueError, match=match):
        euler_top_period(inertia, M0)


def test_separatrix_tolerance_is_relative():
    # Exactly on the separatrix for I = (1, 2, 3): M1^2 (1 - 2/1) + M3^2 (1 - 2/3) = 0
    # -> M3^2 = 3 M1^2.  Scale-invariant rejection; slightly off it is accepted.
    for s in (1e-6, 1.0, 1e6):
        with pytest.raises(ValueError, match="separatrix"):
            euler_top_exact((1.0, 2.0, 3.0), (s, 0.0, s * np.sqrt(3.0)), T)
    M = euler_top_exact((1.0, 2.0, 3.0), (1.0, 0.0, np.sqrt(3.0) * (1 + 1e-6)), T)
    assert np.all(np.isfinite(M))
