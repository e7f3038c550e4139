"""The entrywise evaluator (lpjax._ensemble._kernels._entrywise): one member's program run over a
block of members, each value a vector over the members, agrees with ``vmap`` (member axis last) for every method's own
step, for loops whose trip count differs between members, and refuses what it cannot run."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._ensemble._kernels._entrywise import Unfusable, members_last
from lpjax.systems import heavy_top, lagrange_top, rigid_body, rigid_body_n

B = 16
RNG = np.random.default_rng(11)


def _block(y0):
    """B states around ``y0``, members on the last axis."""
    y0 = jnp.asarray(y0)
    return (y0[:, None] * (1 + 0.2 * RNG.normal(size=(y0.size, B)))).astype(y0.dtype)


def _step_fn(method):
    def step(system, y):
        state = method.init(system, y, 0.01)
        state, result, info = method.step(system, state, 0.01)
        return method.observe(system, state), result._value, info.iterations, info.residual

    return step


CASES = [
    ("Suris rest", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), [0.3, -0.2, 0.5, 0.0, 0.6, 0.8]),
    ("Suris moving n=4", lagrange_top(4, frame="moving"), lpjax.SurisLagrangeTop(), np.linspace(0.1, 1.0, 10)),
    ("Moser-Veselov so(3)", rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.MoserVeselov(), [1.0, 0.5, 0.8]),
    ("Moser-Veselov so(4)", rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])), lpjax.MoserVeselov(),
     [1.0, 0.3, -0.5, 0.2, 0.8, -0.4]),
    ("RK4 heavy top", heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0), lpjax.RK4(),
     [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]),
    ("GL4, early exit", rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.GaussLegendre(2), [1.0, 0.5, 0.8]),
    ("GL4 heavy top, fixed iterations", heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0),
     lpjax.GaussLegendre(2, early_exit=False), [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]),
]


@pytest.mark.parametrize("name, system, method, y0", CASES, ids=[c[0] for c in CASES])
def test_a_step_entry_by_entry_is_the_vmapped_step(name, system, method, y0):
    """Every method's own step, unchanged: states to 4 ulp, result codes and iteration counts
    exactly (the two forms are compiled differently, so the last bit may differ)."""
    ys = _block(np.asarray(y0, np.float64))
    f = _step_fn(method)
    ref = eqx.filter_jit(jax.vmap(f, in_axes=(None, -1), out_axes=-1))(system, ys)
    got = eqx.filter_jit(members_last(f, (False, True)))(system, ys)
    scale = float(jnp.max(jnp.abs(ref[0])))
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=4 * np.finfo(np.float64).eps * scale)
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2], ref[2])
    np.testing.assert_allclose(got[3], ref[3], rtol=0, atol=1e-15)


def test_batched_parameters():
    """A system batched over its parameters (the member axis last on its arrays too)."""
    systems = eqx.filter_vmap(rigid_body)(jnp.asarray(1.0 + RNG.random(size=(B, 3))))
    dyn, static = eqx.partition(systems, eqx.is_array)
    dyn = jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), dyn)
    ys = _block(np.array([1.0, 0.5, 0.8]))
    step = _step_fn(lpjax.MoserVeselov())

    def f(dyn, y):
        return step(eqx.combine(dyn, static), y)

    ref = jax.jit(jax.vmap(f, in_axes=-1, out_axes=-1))(dyn, ys)
    got = jax.jit(members_last(f, (True, True)))(dyn, ys)
    np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(got[2], ref[2])


def test_loops_with_a_trip_count_per_member():
    """A while loop whose trip count depends on the member runs until the last member is done
    and keeps each member's carry from its own exit (vmap's semantics), bit for bit; a cond on a
    per-member predicate selects; a scan over per-member xs gives per-member ys."""

    def newton_sqrt(a):
        def body(c):
            x, k = c
            return 0.5 * (x + a / x), k + 1

        return jax.lax.while_loop(lambda c: jnp.abs(c[0] * c[0] - a) > 1e-12 * a, body, (a, 0))

    def branchy(a):
        return jax.lax.cond(a > 2.0, lambda x: jnp.sin(x) * x, lambda x: x**3 - 1.0, a)

    def scanned(a):
        xs = jnp.stack([a, 2 * a, a * a])
        return jax.lax.scan(lambda c, x: (c * x + 1.0, c - x), a, xs)

    a = jnp.asarray(np.geomspace(0.5, 1e6, B))
    for f in (newton_sqrt, branchy, scanned):
        ref = jax.vmap(f, in_axes=-1, out_axes=-1)(a)
        got = jax.jit(members_last(f, True))(a)
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            np.testing.assert_array_equal(g, r)
    iters = jax.jit(members_last(newton_sqrt, True))(a)[1]
    assert int(iters.min()) < int(iters.max())  # the members really did need different counts


def test_what_it_cannot_run_is_refused():
    """A primitive it does not know, or an index that depends on the members, raises Unfusable
    (the ensemble then falls back to vmap)."""
    ys = _block(np.array([1.0, 0.5, 0.8]))
    with pytest.raises(Unfusable, match="sort"):
        members_last(lambda y: jnp.sort(y), True)(ys)
    with pytest.raises(Unfusable, match="'lu'"):  # a dense LU (lpjax's own small solves are unrolled)
        members_last(lambda y: jnp.linalg.solve(jnp.eye(3) + jnp.outer(y, y), y), True)(ys)
    with pytest.raises(Unfusable, match="indices that depend on the members"):
        members_last(lambda y: y[(y[0] > 1.0).astype(jnp.int32)], True)(ys)
    with pytest.raises(ValueError, match="one common last axis"):
        members_last(lambda y, z: y + z, (True, True))(ys, ys[:2, :3])


def test_small_solves_unroll_only_where_traced_entry_by_entry():
    """``solve_small``/``logdet_spd`` are LAPACK calls in a vmapped program (cheap to compile) and
    LU-free scalar code inside the entrywise trace; both give the same numbers."""
    from lpjax._small import logdet_spd, solve_small
    from lpjax._ensemble._kernels._entrywise import trace

    A = jnp.asarray(RNG.normal(size=(6, 6)) + 6 * np.eye(6))
    S, b = A @ A.T, jnp.asarray(RNG.normal(size=6))

    def f(A, S, b):
        return solve_small(A, b, pivot=True), solve_small(S, b), logdet_spd(S)

    def calls(jaxpr):  # primitives called anywhere, nested jaxprs included
        return set(re.findall(r"= (\w+)\[?", str(jaxpr)))

    assert "lu" in calls(jax.make_jaxpr(f)(A, S, b))
    unrolled = trace(f, A, S, b)[0]
    assert not calls(unrolled) & {"lu", "cholesky", "triangular_solve", "custom_linear_solve"}
    got, ref = jax.core.eval_jaxpr(unrolled.jaxpr, unrolled.consts, A, S, b), f(A, S, b)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-13)
    np.testing.assert_allclose(got[2], np.linalg.slogdet(np.asarray(S))[1], rtol=1e-14)
