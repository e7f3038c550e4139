"""The identity memos behind lpjax.ensemble's preparation: a repeated call with the same
immutable system and method reuses what the first built; anything that can change in place
(a NumPy array in the system) is prepared again, so a mutated system never runs stale."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax._ensemble import _api
from lpjax._memo import SIZE, by_identity
from lpjax.systems import rigid_body


class _Holder(eqx.Module):
    a: object


def _counting():
    calls = []

    @by_identity
    def f(*args):
        calls.append(args)
        return object()

    return f, calls


def test_immutable_arguments_are_remembered_by_identity_and_values_by_value():
    f, calls = _counting()
    h = _Holder(jnp.ones(3))
    first = f(h, 0.5, (3, 2), np.dtype("float64"))
    assert f(h, 0.5, (3, 2), np.dtype("float64")) is first
    assert len(calls) == 1
    f(_Holder(jnp.ones(3)), 0.5, (3, 2), np.dtype("float64"))  # an equal but other object
    f(h, 0.25, (3, 2), np.dtype("float64"))
    f(h, 1, (3, 2), np.dtype("float64"))  # 1 and 1.0 hash alike: the type tells them apart
    f(h, 1.0, (3, 2), np.dtype("float64"))
    assert len(calls) == 5


def test_mutable_arguments_are_never_remembered():
    f, calls = _counting()
    h = _Holder(np.ones(3))
    assert f(h) is not f(h)
    assert f([1, 2]) is not f([1, 2])
    assert len(calls) == 4


def test_the_memo_keeps_its_last_entries_only():
    f, calls = _counting()
    hs = [_Holder(jnp.full(2, float(k))) for k in range(SIZE + 1)]
    for h in hs:
        f(h)
    f(hs[-1])
    assert len(calls) == SIZE + 1
    f(hs[0])  # the oldest was dropped
    assert len(calls) == SIZE + 2


def test_a_repeated_ensemble_reuses_its_preparation():
    built = _api._kernel_for.built  # how many times the chunk function was prepared
    system, method = rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.MoserVeselov()
    y0s = np.random.default_rng(0).normal(size=(16, 3))
    a = lpjax.ensemble(system, method, y0s, 0.05, 8, kernel="scan")
    n = built()
    b = lpjax.ensemble(system, method, y0s + 1.0, 0.05, 8, kernel="scan")
    assert n >= 1 and built() == n  # the same system and method: nothing built again
    ref = lpjax.ensemble(rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.MoserVeselov(), y0s + 1.0, 0.05, 8,
                         kernel="scan")
    assert built() > n  # other objects: built
    assert not np.array_equal(a.final_state, b.final_state)
    assert np.array_equal(b.final_state, ref.final_state)


class _Inertia(eqx.Module):
    """``h = ½ Σ m_i² / I_i`` with the inertia a NumPy array (a user's mutable leaf)."""

    inertia: np.ndarray

    def __call__(self, m):
        return 0.5 * jnp.sum(m * m / self.inertia)


def test_a_system_changed_in_place_is_not_run_stale():
    inertia = np.array([1.0, 2.0, 3.0])
    system = lpjax.LiePoissonSystem(lpjax.algebras.so3(), _Inertia(inertia), -1)
    y0s = np.random.default_rng(1).normal(size=(8, 3))
    before = lpjax.ensemble(system, lpjax.RK4(), y0s, 0.05, 10, kernel="scan").final_state
    inertia[:] = [3.0, 1.0, 2.0]
    after = lpjax.ensemble(system, lpjax.RK4(), y0s, 0.05, 10, kernel="scan").final_state
    fresh = lpjax.LiePoissonSystem(lpjax.algebras.so3(), _Inertia(np.array([3.0, 1.0, 2.0])), -1)
    ref = lpjax.ensemble(fresh, lpjax.RK4(), y0s, 0.05, 10, kernel="scan").final_state
    assert not np.array_equal(before, after)
    assert np.array_equal(after, ref)
