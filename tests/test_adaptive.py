"""Adaptive ensembles (``lpjax.ensemble(..., controller=lpjax.PIDController(...))``): each member
is diffrax's ``diffeqsolve(lpjax.diffrax.GaussLegendre(s), PIDController(step_ts=ts))`` on that
member, the quadratic Casimirs hold to the roundoff of the member's own steps, the scan, native
and fused kernels agree (with a NaN member and one stopped by ``max_steps``), and a store
resumes bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import lpjax
from lpjax.systems import heavy_top, rigid_body

HT = heavy_top(np.array([1.0, 1.3, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0)


def spinning_tops(n: int, fastest: float, seed: int = 0) -> np.ndarray:
    """``n`` heavy-top states, |M| log-uniform on [1, fastest], M and Γ in random directions, |Γ| = 1."""
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(0.0, np.log(fastest), n))
    M, G = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    M *= (size / np.linalg.norm(M, axis=1))[:, None]
    G /= np.linalg.norm(G, axis=1)[:, None]
    return np.concatenate([M, G], axis=1)


@pytest.mark.parametrize("stages, extrapolate", [(2, True), (3, True), (2, False), (3, False)])
def test_each_member_is_diffrax_with_step_ts(stages, extrapolate):
    """16 members, |M| over [1, 30], diffrax's default (integral) controller: every save within
    1e-9 (relative to the member's largest entry) of diffrax's run of that member, with or
    without local extrapolation, accepted steps within 2% (measured: equal counts, within
    3.7e-13 and 1.3e-12 for GL4 and GL6 going on from the half steps, 8.1e-13 and 5.1e-11 from
    the full step). A PI controller (pcoeff > 0) feeds the
    error estimates of the first, tiny steps, which are roundoff (below 1e-13), into later step
    sizes: the two runs then take sequences of steps that differ by a step or two in 150, and
    their saves differ by up to the tolerance (measured 2e-9 at rtol = 1e-8)."""
    dfx = pytest.importorskip("diffrax")
    import lpjax.diffrax as ldx

    y0s, ts = spinning_tops(16, 30.0), np.array([0.5, 1.25, 2.5, 4.0])
    settings = dict(rtol=1e-8, atol=1e-8)
    sol = lpjax.ensemble(HT, lpjax.GaussLegendre(stages), y0s, 1e-3, controller=lpjax.PIDController(**settings), ts=ts,
                         kernel="scan", local_extrapolation=extrapolate)
    assert sol.settings["local_extrapolation"] is extrapolate
    assert np.all(sol.result == 0)
    ys = np.asarray(sol.observables["state"])
    term = dfx.ODETerm(lambda t, y, args: HT.vector_field(y))
    solve = jax.jit(lambda y0: dfx.diffeqsolve(
        term, ldx.GaussLegendre(stages, local_extrapolation=extrapolate), 0.0, float(ts[-1]), 1e-3, y0, saveat=dfx.SaveAt(ts=jnp.asarray(ts)),
        stepsize_controller=dfx.PIDController(**settings, step_ts=jnp.asarray(ts)), max_steps=100_000))
    worst, accepted = 0.0, []
    for i in range(len(y0s)):
        ref = solve(jnp.asarray(y0s[i]))
        worst = max(worst, np.max(np.abs(ys[i, 1:] - np.asarray(ref.ys))) / np.max(np.abs(y0s[i])))
        accepted.append((int(sol.stats["num_accepted_steps"][i]), int(ref.stats["num_accepted_steps"])))
    accepted = np.array(accepted)
    assert worst < 1e-9, worst
    assert np.all(np.abs(accepted[:, 0] - accepted[:, 1]) <= 0.02 * accepted[:, 1]), accepted
    assert accepted[:, 1].max() > 10 * accepted[:, 1].min()  # heterogeneous: steps span a decade


@pytest.mark.parametrize("stages, extrapolate, bound", [(2, True, 100), (3, True, 10), (2, False, 1000)])
def test_going_on_from_the_half_steps_reaches_the_tolerance(stages, extrapolate, bound):
    """The rigid body (I = (1, 2, 3)) to t = 10 at rtol = atol = 1e-11, 16 members against the
    closed form (``scipy.special.ellipj``): by default (local extrapolation) the worst member
    ends within 100 tolerances for GL4 (measured 25) and 10 for GL6 (0.92); going on from the
    full step, GL4 ends 398 tolerances off (GL6: 59), with the same steps."""
    from lpjax.exact import euler_top_exact

    inertia = np.array([1.0, 2.0, 3.0])
    y0s = np.vstack([[1.0, 0.5, 0.8], np.random.default_rng(0).normal(size=(15, 3))])
    sol = lpjax.ensemble(rigid_body(inertia), lpjax.GaussLegendre(stages), y0s, None, t1=10.0, kernel="scan",
                         controller=lpjax.PIDController(rtol=1e-11, atol=1e-11),
                         **({} if extrapolate else {"local_extrapolation": False}))
    exact = np.array([euler_top_exact(inertia, y, np.array([10.0]))[-1] for y in y0s])
    worst = np.max(np.abs(np.asarray(sol.final_state) - exact) / np.max(np.abs(y0s), axis=1)[:, None]) / 1e-11
    assert worst < bound, worst
    if not extrapolate:
        assert worst > 100, worst  # the full step's error: what the default improves on


def test_the_first_step_is_diffrax_selection():
    """``dt0=None``: :meth:`PIDController.initial_step` is diffrax's ``_select_initial_step``
    (called directly: ``diffeqsolve`` wraps its terms, and then selects 0.01 for any ODE)."""
    pytest.importorskip("diffrax")
    from diffrax import ODETerm
    from diffrax._step_size_controller.pid import _select_initial_step
    import optimistix as optx

    ctrl = lpjax.PIDController(rtol=1e-7, atol=1e-9)
    term = ODETerm(lambda t, y, args: HT.vector_field(y))
    for y0 in spinning_tops(5, 100.0, seed=3):
        y0 = jnp.asarray(y0)
        ours = ctrl.initial_step(HT.vector_field, y0, 5)
        ref = _select_initial_step(term, 0.0, y0, None, lambda terms, t, y, args: terms.vf(t, y, args), 5,
                                   1e-7, 1e-9, optx.rms_norm)
        np.testing.assert_allclose(float(ours), float(ref), rtol=1e-14)


def test_casimirs_hold_to_the_roundoff_of_each_members_steps():
    """t = 100, |M| over [1, 30] (steps spanning a decade and more): |Γ|² and M·Γ of every
    member within 5e-15·√(its steps) relative (to |Γ|² and |M||Γ|) at every save."""
    y0s = spinning_tops(12, 30.0, seed=1)
    sol = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, controller=lpjax.PIDController(rtol=1e-7, atol=1e-7),
                         ts=np.linspace(10.0, 100.0, 10), observe="casimirs")
    assert np.all(sol.result == 0) and np.all(sol.stats["t_reached"] == 100.0)
    c = np.asarray(sol.observables["casimirs"])  # (N, 11, 2)
    names = HT.casimir_names
    scale = {"|Γ|²": np.ones(len(y0s)), "M·Γ": np.linalg.norm(y0s[:, :3], axis=1)}
    steps = np.asarray(sol.stats["num_accepted_steps"]) + np.asarray(sol.stats["num_rejected_steps"])
    assert steps.max() > 10 * steps.min(), steps
    for k, name in enumerate(names):
        drift = np.max(np.abs(c[:, :, k] - c[:, :1, k]), axis=1) / scale[name]
        assert np.all(drift <= 5e-15 * np.sqrt(steps)), (name, drift / np.sqrt(steps), steps)


def _special_members():
    y0s = spinning_tops(6, 30.0, seed=2)
    y0s[1, 2] = np.nan  # fails at its start
    return y0s


@pytest.mark.parametrize("kernel", ["native", "fused"])
def test_the_kernels_agree_with_the_scan(kernel):
    """Equal step counts and result codes, saves within 1e-12 relative, for a NaN member and a
    member stopped by ``max_steps`` too (which stops at a time that carries the kernel's own
    roundoff: within 1e-11 of the scan's)."""
    if kernel == "native":
        pytest.importorskip("llvmlite")
    y0s = _special_members()
    kw = dict(controller=lpjax.PIDController(rtol=1e-6, atol=1e-6), ts=[1.0, 2.0], max_steps=100)
    scan = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, kernel="scan", **kw)
    other = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, kernel=kernel, **kw)
    assert other.settings["kernel"] == kernel
    codes = lpjax.RESULTS
    assert scan.result[1] == codes.invalid_initial_state._value
    stopped = scan.result == codes.max_steps_reached._value
    assert stopped.sum() >= 1 and np.all(scan.stats["t_reached"][stopped] < 2.0)
    np.testing.assert_array_equal(other.result, scan.result)
    for name in ("num_accepted_steps", "num_rejected_steps"):
        np.testing.assert_array_equal(other.stats[name], scan.stats[name])
    ok = scan.result == 0
    a, b = np.asarray(other.observables["state"]), np.asarray(scan.observables["state"])
    rel = np.max(np.abs(a - b), axis=(1, 2)) / np.max(np.abs(b[:, 0]), axis=1)
    assert np.all(rel[ok] <= 1e-12), rel
    np.testing.assert_allclose(other.stats["t_reached"][stopped], scan.stats["t_reached"][stopped], rtol=1e-11)
    np.testing.assert_array_equal(other.final_state[1], y0s[1])  # (NaN where y0 has it: never stepped)


def test_ensemble_function_under_jit_equals_ensemble_and_sorting_does_not_change_members():
    """The pure chunk function (inside ``jax.jit``) equals :func:`lpjax.ensemble`; members run
    sorted by predicted cost and come back in their own order, each equal to a run of it alone."""
    y0s = spinning_tops(10, 20.0, seed=4)
    kw = dict(controller=lpjax.PIDController(rtol=1e-7, atol=1e-7), ts=[0.5, 1.0])
    f = lpjax.ensemble_function(HT, lpjax.GaussLegendre(2), None, **kw)
    out = jax.jit(f)(jnp.asarray(y0s))
    sol = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, kernel="scan", **kw)
    np.testing.assert_array_equal(np.asarray(out.final_state), sol.final_state)
    np.testing.assert_array_equal(np.asarray(out.stats["num_accepted_steps"]), sol.stats["num_accepted_steps"])
    alone = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s[7:8], None, kernel="scan", **kw)
    np.testing.assert_allclose(alone.final_state[0], sol.final_state[7], rtol=1e-14, atol=1e-14)
    assert alone.stats["num_accepted_steps"][0] == sol.stats["num_accepted_steps"][7]


def test_collective_gauss_legendre_adapts_on_the_lifted_state():
    """Collective(GL4) on the rigid body: adapts (steps grow with |M|) and keeps |M|² to roundoff."""
    rb = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    y0s = np.array([[1.0, 0.5, 0.8], [10.0, 5.0, 8.0]])
    sol = lpjax.ensemble(rb, lpjax.Collective(lpjax.GaussLegendre(2)), y0s, None,
                         controller=lpjax.PIDController(rtol=1e-8, atol=1e-8), t1=5.0, observe="casimirs", kernel="scan")
    assert np.all(sol.result == 0)
    steps = np.asarray(sol.stats["num_accepted_steps"])
    assert steps[1] > 3 * steps[0], steps
    c = np.asarray(sol.observables["casimirs"])[:, :, 0]
    assert np.all(np.abs(c[:, -1] - c[:, 0]) <= 1e-13 * c[:, 0]), c


def test_a_store_resumes_bit_for_bit(tmp_path):
    """A store whose chunks were partly lost resumes to the arrays of an uninterrupted run, bit
    for bit, and keeps the adaptive settings and statistics."""
    y0s = spinning_tops(40, 20.0, seed=5)
    kw = dict(controller=lpjax.PIDController(rtol=1e-7, atol=1e-7), ts=[0.5, 1.0], chunk_size=10, kernel="scan",
              observe="energy")
    whole = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, out=str(tmp_path / "whole.zarr"), **kw)
    path = str(tmp_path / "run.zarr")
    lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, out=path, **kw)
    group = zarr.open_group(path, mode="r+")
    group["chunk_done"][1:3] = 0  # chunks 1 and 2 lost: their rows overwritten
    group["final_state"][10:30] = 0.0
    group["stats/num_accepted_steps"][10:30] = 0
    resumed = lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, out=path, resume=True, **kw)
    for a, b in [(resumed.final_state, whole.final_state), (resumed.result, whole.result),
                 (resumed.observables["energy"], whole.observables["energy"])]:
        np.testing.assert_array_equal(np.asarray(a[:]), np.asarray(b[:]))
    for name in ("num_accepted_steps", "num_rejected_steps", "next_dt", "t_reached"):
        np.testing.assert_array_equal(np.asarray(resumed.stats[name][:]), np.asarray(whole.stats[name][:]))
    reopened = lpjax.open_ensemble(path)
    assert reopened.settings["controller"]["rtol"] == 1e-7 and reopened.settings["ts"] == [0.5, 1.0]
    np.testing.assert_array_equal(np.asarray(reopened.ts), [0.0, 0.5, 1.0])
    assert set(reopened.stats) == {"num_accepted_steps", "num_rejected_steps", "next_dt", "t_reached"}


def test_bad_adaptive_inputs_are_named():
    y0s, ctrl = spinning_tops(2, 5.0), lpjax.PIDController(rtol=1e-6, atol=1e-6)
    run = lambda method=lpjax.GaussLegendre(2), dt=None, *a, **kw: lpjax.ensemble(HT, method, y0s, dt, *a, **kw)  # noqa: E731
    with pytest.raises(TypeError, match="local error estimate.*RK4"):
        run(lpjax.RK4(), controller=ctrl, t1=1.0)
    with pytest.raises(ValueError, match="not n_steps"):
        run(lpjax.GaussLegendre(2), 0.01, 10, controller=ctrl, t1=1.0)
    with pytest.raises(ValueError, match="t1 belong to adaptive runs"):
        run(lpjax.GaussLegendre(2), 0.01, 10, t1=1.0)
    with pytest.raises(ValueError, match="needs its final time"):
        run(controller=ctrl)
    with pytest.raises(ValueError, match="strictly increasing"):
        run(controller=ctrl, ts=[1.0, 0.5])
    with pytest.raises(ValueError, match="ts\\[-1\\] = 2.0 is the final time, but t1 = 1.0"):
        run(controller=ctrl, ts=[1.0, 2.0], t1=1.0)
    with pytest.raises(ValueError, match="stats=True"):
        run(controller=ctrl, t1=1.0, stats=True)
    with pytest.raises(ValueError, match="ensemble: dt0 must be finite and > 0"):
        run(dt=-1.0, controller=ctrl, t1=1.0)
    with pytest.raises(TypeError, match="lpjax.PIDController"):
        run(controller="pid", t1=1.0)
    with pytest.raises(ValueError, match="max_steps"):
        run(controller=ctrl, t1=1.0, max_steps=0)
    with pytest.raises(ValueError, match="error_estimate must be one of 'doubling', 'defect'"):
        run(controller=ctrl, t1=1.0, error_estimate="embedded")
    with pytest.raises(ValueError, match="error_estimate belong to adaptive runs"):
        run(lpjax.GaussLegendre(2), 0.01, 10, error_estimate="defect")
    with pytest.raises(ValueError, match="local_extrapolation belong to adaptive runs"):
        run(lpjax.GaussLegendre(2), 0.01, 10, local_extrapolation=True)
    with pytest.raises(ValueError, match="local_extrapolation goes on from the two half steps"):
        run(controller=ctrl, t1=1.0, error_estimate="defect", local_extrapolation=True)
    with pytest.raises(TypeError, match="local_extrapolation must be True, False or None"):
        run(controller=ctrl, t1=1.0, local_extrapolation="yes")


def _one_step_error(stages: int, estimate: str, system, y0, h: float):
    """``(estimate, true local error)`` of one GL step of size h from y0 (the truth: DOP853 at
    rtol = 2.3e-14, scipy's floor, atol = 1e-14)."""
    from scipy.integrate import solve_ivp

    from lpjax._integrator._error_estimates import step_and_error

    method = lpjax.GaussLegendre(stages, tol=1e-15, max_iters=100)
    y0 = jnp.asarray(y0)
    new, err, result, _ = step_and_error(method, system, method.init(system, y0, h), jnp.asarray(h), estimate)
    assert result == lpjax.RESULTS.successful
    f = jax.jit(lambda y: system.vector_field(y))
    ref = solve_ivp(lambda t, y: np.asarray(f(y)), (0.0, h), np.asarray(y0), method="DOP853", rtol=2.3e-14,
                    atol=1e-14).y[:, -1]
    return np.linalg.norm(np.asarray(err)), np.linalg.norm(np.asarray(new.y) - ref)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_step_doubling_estimates_the_local_error_and_the_defect_has_order_s_plus_1(stages):
    """On the heavy top: step doubling's estimate is the true local error to 10% (as h → 0:
    its own error is of higher order); the defect estimate falls as h^{s+1} (halving h divides
    it by 2^{s+1} within 10%)."""
    y0 = [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]
    h = {1: 0.02, 2: 0.1, 3: 0.1}[stages]
    est, true = _one_step_error(stages, "doubling", HT, y0, h)
    assert abs(est / true - 1) < 0.1, (est, true)
    big, small = _one_step_error(stages, "defect", HT, y0, h)[0], _one_step_error(stages, "defect", HT, y0, h / 2)[0]
    assert abs(big / small / 2 ** (stages + 1) - 1) < 0.1, big / small


def test_neither_estimate_vanishes_on_a_linear_problem():
    """y' = A y (a harmonic oscillator): the estimates made of slopes along the collocation
    polynomial vanish there; these do not. Doubling is the true local error to 1%; the defect
    is larger than it (measured 22-19000 times at h = 0.2) and falls as h^{s+1}."""
    osc = lpjax.CanonicalSystem(lambda y: 0.5 * (y[0] ** 2 + 4.0 * y[1] ** 2))
    for stages in (1, 2, 3):
        est, true = _one_step_error(stages, "doubling", osc, [1.0, 0.5], 0.2)
        assert abs(est / true - 1) < 0.01, (stages, est, true)
        big, small = (_one_step_error(stages, "defect", osc, [1.0, 0.5], h)[0] for h in (0.2, 0.1))
        assert big > 10 * true and abs(big / small / 2 ** (stages + 1) - 1) < 0.1, (stages, big, small, true)


def test_the_defect_estimate_runs_in_every_kernel():
    """``error_estimate="defect"``: one stage solve an attempt, the kernels agree, the Casimirs
    hold to roundoff, and the steps still follow each member's speed."""
    y0s = spinning_tops(6, 30.0, seed=6)
    kw = dict(controller=lpjax.PIDController(rtol=1e-6, atol=1e-6), t1=2.0, error_estimate="defect",
              observe="casimirs")
    runs = {k: lpjax.ensemble(HT, lpjax.GaussLegendre(2), y0s, None, kernel=k, **kw)
            for k in ["scan", "fused"] + (["native"] if lpjax._ensemble._kernels.native_available() else [])}
    scan = runs["scan"]
    assert np.all(scan.result == 0) and scan.settings["error_estimate"] == "defect"
    for sol in runs.values():
        np.testing.assert_array_equal(sol.stats["num_accepted_steps"], scan.stats["num_accepted_steps"])
        np.testing.assert_allclose(sol.final_state, scan.final_state, rtol=1e-12, atol=1e-12)
    steps = np.asarray(scan.stats["num_accepted_steps"])
    size = np.linalg.norm(y0s[:, :3], axis=1)
    assert steps[np.argmax(size)] > 3 * steps[np.argmin(size)], (steps, size)
    c = np.asarray(scan.observables["casimirs"])
    assert np.max(np.abs(c[:, -1] - c[:, 0])) < 1e-13 * np.max(size)


def test_both_member_programs_keep_the_member_contract():
    """The fixed-step and the adaptive member are one contract (``AbstractMember``); only the
    adaptive one declares a cost, so only its members are run in cost order."""
    from lpjax._adaptive import AdaptiveMember
    from lpjax._member import FixedMember as _Member
    from lpjax._member import AbstractMember, in_cost_order

    assert issubclass(_Member, AbstractMember) and issubclass(AdaptiveMember, AbstractMember)
    assert AdaptiveMember.sorts and not _Member.sorts

    class Unsorted:  # a member that declares no cost: run as given, no step_estimate asked for
        sorts = False

    y0s = np.arange(4.0)
    np.testing.assert_array_equal(in_cost_order(lambda d, y: 2 * y, Unsorted, None, y0s, False), 2 * y0s)
