"""lpjax.ensemble_function: the pure chunk function that ensemble is built on. It equals
ensemble, goes inside a user's own jit, takes a batched system's arrays as an argument, picks
its kernel by platform; systems batched over parameters (eqx.filter_vmap of a constructor)
run with every method family, member by member equal to integrate, and a batched system
passed without the flag is named as one."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import lagrangians
from lpjax.systems import (
    clebsch_case, lagrange_top, rigid_body, rigid_body_n, rubber_chaplygin_sphere, veselova,
)

RNG = np.random.default_rng(25)
RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = RNG.normal(size=(40, 3))
N_B = 16  # members of the batched-parameter runs


def test_equals_ensemble_and_jits_inside_user_code():
    """f(y0s) is ensemble's chunk: the same arrays bit for bit as ensemble with the same kernel
    (the scan: "auto" on CPU, where ensemble's "auto" is the native kernel, a host callback)
    (any N: padded inside); under a user's jit with an outer computation (a mean energy and
    its use), compiled once."""
    f = lpjax.ensemble_function(RB, lpjax.GaussLegendre(2), 0.02, 40, save_every=10, observe="energy")
    assert f.kernel == lpjax.kernels.Scan() and f.platform == "cpu"
    out = f(jnp.asarray(M0[:37]))
    sol = lpjax.ensemble(RB, lpjax.GaussLegendre(2), M0[:37], 0.02, 40, save_every=10, observe="energy", kernel="scan")
    assert out.final_state.shape == (37, 3) and out.observables["energy"].shape == (37, 5)
    np.testing.assert_array_equal(out.final_state, sol.final_state)
    np.testing.assert_array_equal(out.observables["energy"], sol.observables["energy"])
    np.testing.assert_array_equal(out.result, sol.result)
    for k, v in sol.stats.items():
        np.testing.assert_array_equal(out.stats[k], v)

    traces = []

    @jax.jit
    def drift(y0s):
        traces.append(1)
        e = f(y0s).observables["energy"]
        return jnp.max(jnp.abs(e[:, -1] - e[:, 0]) / e[:, 0])

    d1, d2 = drift(jnp.asarray(M0[:37])), drift(jnp.asarray(M0[3:40]))
    assert len(traces) == 1
    assert 0 < float(d1) < 1e-12 and 0 < float(d2) < 1e-12  # GL4 keeps the energy to roundoff


def test_platform_and_kernel_choice_and_bad_inputs():
    assert lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="cuda").kernel == lpjax.kernels.Fused()
    assert lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="rocm").kernel == lpjax.kernels.Fused()
    assert lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="tpu").kernel == lpjax.kernels.Scan()
    assert lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="cpu", kernel="entries").kernel == lpjax.kernels.Entries()
    with pytest.raises(ValueError, match="platform must be one of 'cpu', 'gpu', 'cuda', 'rocm', 'tpu' or None, got 'metal'"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="metal")
    with pytest.raises(ValueError, match="kernel='fused' is a Triton kernel"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, platform="tpu", kernel="fused")
    with pytest.raises(ValueError, match="kernel must be one of"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, kernel="pallas")
    with pytest.raises(ValueError, match="must be divisible by save_every"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10, save_every=3)
    with pytest.raises(ValueError, match="dt must be finite and > 0"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.0, 10)
    with pytest.raises(TypeError, match="method must be an lpjax integrator"):
        lpjax.ensemble_function(RB, "RK4", 0.1, 10)
    f = lpjax.ensemble_function(RB, lpjax.RK4(), 0.1, 10)
    with pytest.raises(ValueError, match=r"shape \(N, d\) and dtype float64"):
        f(jnp.ones(3))
    with pytest.raises(ValueError, match=r"shape \(N, d\) and dtype float64 .* got shape \(4, 3\) and dtype float32"):
        f(jnp.ones((4, 3), jnp.float32))
    with pytest.raises(ValueError, match="3"):  # the system's own state check names the size
        f(jnp.ones((4, 5)))
    with pytest.raises(TypeError, match=r"batched_system=False\): call it as f\(y0s\)"):
        f(jnp.ones((4, 3)), RB)


# ------------------------------------------------------------------ systems batched over parameters


def _positive(shape):
    return jnp.asarray(1.0 + RNG.random(size=shape))


def _family_cases():
    """(id, batched systems made by eqx.filter_vmap, method, y0s (N_B, d))."""
    inertias = _positive((N_B, 3))
    rbs = eqx.filter_vmap(rigid_body)(inertias)
    m0 = jnp.asarray(RNG.normal(size=(N_B, 3)))
    top0 = RNG.normal(size=(N_B, 6)) * 0.4
    top0[:, 3:] /= np.linalg.norm(top0[:, 3:], axis=1, keepdims=True)
    ves = eqx.filter_vmap(veselova)(inertias)
    rubber = eqx.filter_vmap(lambda i: rubber_chaplygin_sphere(i, 0.5))(inertias)
    return [
        ("Suris rest", eqx.filter_vmap(lambda p: lagrange_top(3, frame="rest", p=p))(_positive((N_B, 3))),
         lpjax.SurisLagrangeTop(), jnp.asarray(top0)),
        ("Suris moving n=4", eqx.filter_vmap(lambda a: lagrange_top(4, a, frame="moving"))(0.3 + 0.4 * jnp.asarray(RNG.random(N_B))),
         lpjax.SurisLagrangeTop(), jnp.asarray(RNG.normal(size=(N_B, 10)) * 0.5)),
        ("Suris-Clebsch", eqx.filter_vmap(clebsch_case)(_positive((N_B, 3))), lpjax.SurisClebsch(),
         jnp.asarray(RNG.normal(size=(N_B, 6)) * 0.5)),
        ("Moser-Veselov so(3)", rbs, lpjax.MoserVeselov(), m0),
        ("Moser-Veselov so(4)", eqx.filter_vmap(rigid_body_n)(_positive((N_B, 4))), lpjax.MoserVeselov(),
         jnp.asarray(RNG.normal(size=(N_B, 6)))),
        ("GL6", rbs, lpjax.GaussLegendre(3), m0),
        ("RK4", rbs, lpjax.RK4(), m0),
        ("DEP", rbs, lpjax.DiscreteEulerPoincare(lagrangians.moser_veselov(RB)), m0),
        ("Collective(GL4)", rbs, lpjax.Collective(lpjax.GaussLegendre(2)), m0),
        ("Veselova GL4", ves, lpjax.GaussLegendre(2), ves.default),
        ("Projected(GL4)", rubber, lpjax.Projected(lpjax.GaussLegendre(2)), rubber.default),
    ]


FAMILIES = _family_cases()


def _member(systems, k):
    dyn, static = eqx.partition(systems, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda a: a[k], dyn), static)


@pytest.mark.parametrize("name, systems, method, y0s", FAMILIES, ids=[c[0] for c in FAMILIES])
def test_batched_parameters_for_every_family(name, systems, method, y0s):
    """ensemble(systems, method, y0s, batched_system=True) equals integrate on each member's own
    system (1e-12); without the flag the system is named as batched (the method's check runs on
    one member)."""
    sol = lpjax.ensemble(systems, method, y0s, 0.02, 20, save_every=10, batched_system=True)
    assert sol.failed.size == 0
    for k in (0, 7, N_B - 1):
        ref = lpjax.integrate(_member(systems, k), method, y0s[k], 0.02, 20, save_every=10)
        np.testing.assert_allclose(sol.observables["state"][k], ref.ys, rtol=0, atol=1e-12)
    if name != "DEP":  # DEP's dynamics are its Lagrangian's: it never reads the system's arrays
        with pytest.raises(ValueError, match=f"looks batched over parameters .* leading axis of {N_B}.* batched_system"):
            lpjax.ensemble(systems, method, y0s, 0.02, 20)


def test_batched_parameters_as_an_argument_and_in_the_fused_kernel():
    """ensemble_function takes the batched system (or its arrays) as its second argument, under
    jit; the fused kernel (interpret mode) with per-member system arrays: each program reads its
    own block of parameters."""
    name, systems, method, y0s = FAMILIES[3]  # Moser–Veselov, 16 rigid bodies
    kw = dict(save_every=10, batched_system=True, chunk_size=N_B, stats=True)
    ref = lpjax.ensemble(systems, method, y0s, 0.02, 20, kernel="scan", **kw)
    f = lpjax.ensemble_function(systems, method, 0.02, 20, save_every=10, batched_system=True)
    out = jax.jit(f)(y0s, eqx.filter(systems, eqx.is_array))  # dt and the method's arrays folded in: roundoff
    np.testing.assert_allclose(out.final_state, ref.final_state, rtol=0, atol=1e-15 * np.max(np.abs(ref.final_state)))
    np.testing.assert_allclose(f(y0s, systems).final_state, out.final_state, rtol=0, atol=1e-15 * np.max(np.abs(out.final_state)))
    with pytest.raises(TypeError, match=r"call it as f\(y0s, system_arrays\)"):
        f(y0s)
    with pytest.raises(ValueError, match="y0s has N = 15 members, the batched system's arrays have leading sizes"):
        f(y0s[:15], systems)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lpjax.ensemble(systems, method, y0s, 0.02, 20, kernel="fused", **kw)
    np.testing.assert_allclose(got.observables["state"], ref.observables["state"], rtol=0, atol=1e-13)
    np.testing.assert_array_equal(got.stats["max_iterations"], ref.stats["max_iterations"])
