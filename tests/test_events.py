"""Events and Poincaré sections (``lpjax.Event``): crossings located by the method's own partial
step, against scipy DOP853's events and the exact Euler top, with the invariants at the
crossings, the trajectory of a section's run unchanged bit for bit, terminal events in every
kernel, the record in a store, and clear refusals."""

import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import lpjax
from lpjax.exact import euler_top_exact
from lpjax.systems import heavy_top, rigid_body

RNG = np.random.default_rng(62)
_m, _a = 0.7 * RNG.normal(size=(16, 3)), RNG.normal(size=(16, 3))
TOPS = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
HT = heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0)
SECTION = lpjax.Event(lambda t, y: y[3], direction=1, terminal=False, max_crossings=10)  # Γ₁ = 0 upwards
INERTIA = np.array([1.0, 2.0, 3.0])
RB = rigid_body(jnp.asarray(INERTIA))
M0 = np.array([1.0, 0.5, 0.3]) * np.linspace(0.6, 1.6, 8)[:, None]
FALL = lpjax.Event(lambda t, y: y[1], direction=-1)  # M₂ = 0 downwards, terminal


def _dop853_crossings(y0):
    """DOP853's crossings of Γ₁ = 0 upwards (rtol = atol = 1e-12), to t = 20: times and states."""
    def event(t, y):
        return y[3]

    event.direction = 1
    ref = solve_ivp(lambda t, y: np.asarray(HT.vector_field(jnp.asarray(y))), (0.0, 20.0), y0, method="DOP853",
                    rtol=1e-12, atol=1e-12, events=event)
    return ref.t_events[0], ref.y_events[0]


def _casimirs(y):
    return np.stack([np.sum(y[..., 3:] ** 2, -1), np.sum(y[..., :3] * y[..., 3:], -1)], -1)


@pytest.fixture(scope="module")
def section():
    """16 heavy tops, GL6 with dt = 0.01 to t = 20, the section Γ₁ = 0 upwards, K = 10."""
    return lpjax.ensemble(HT, lpjax.GaussLegendre(3), TOPS, 0.01, 2000, save_every=500, events=SECTION)


def test_a_section_s_crossings_are_dop853_s(section):
    """Times and states within 1e-8 of DOP853's events (rtol = atol = 1e-12), every crossing."""
    rec = section.events
    assert rec.ts.shape == (16, 10) and rec.ys.shape == (16, 10, 6) and np.all(rec.count >= 1)
    for i in range(16):
        ts, ys = _dop853_crossings(TOPS[i])
        n = int(rec.count[i])
        assert n == min(10, len(ts))
        np.testing.assert_allclose(rec.ts[i, :n], ts[:n], rtol=0, atol=1e-8)
        np.testing.assert_allclose(rec.ys[i, :n], ys[:n], rtol=0, atol=1e-8)
        np.testing.assert_array_equal(rec.which[i, :n], 0)
        assert np.all(np.isnan(rec.ts[i, n:])) and np.all(rec.which[i, n:] == -1)


def test_the_invariants_hold_at_every_crossing(section):
    """The crossing's state is a state of GL6 (its partial step): |Γ|² and M·Γ to 1e-13."""
    rec = section.events
    for i in range(16):
        n = int(rec.count[i])
        np.testing.assert_allclose(_casimirs(rec.ys[i, :n]), np.broadcast_to(_casimirs(TOPS[i]), (n, 2)), rtol=0,
                                   atol=1e-13)


def test_a_section_leaves_the_trajectory_as_it_was(section):
    """Final states and saves equal the run without the section, bit for bit; integrate gives
    the ensemble's record."""
    plain = lpjax.ensemble(HT, lpjax.GaussLegendre(3), TOPS, 0.01, 2000, save_every=500)
    np.testing.assert_array_equal(section.final_state, plain.final_state)
    np.testing.assert_array_equal(np.asarray(section.observables["state"]), np.asarray(plain.observables["state"]))
    assert section.failed.size == 0 and np.all(section.result == 0)
    one = lpjax.integrate(HT, lpjax.GaussLegendre(3), TOPS[5], 0.01, 2000, save_every=500, events=SECTION)
    n = int(one.events.count)
    assert n == section.events.count[5]
    np.testing.assert_allclose(np.asarray(one.events.ts[:n]), section.events.ts[5, :n], rtol=0, atol=1e-13)


def _exact_fall(M):
    """The first time M₂ of the exact Euler top crosses 0 downwards, and the state there."""
    t = np.linspace(0.0, 20.0, 20001)
    m2 = euler_top_exact(INERTIA, M, t)[:, 1]
    k = int(np.flatnonzero((m2[:-1] > 0) & (m2[1:] <= 0))[0])
    t_star = brentq(lambda s: euler_top_exact(INERTIA, M, s)[1], t[k], t[k + 1], xtol=1e-15, rtol=1e-15)
    return t_star, euler_top_exact(INERTIA, M, t_star)


@pytest.fixture(scope="module")
def falls():
    return {k: lpjax.ensemble(RB, lpjax.GaussLegendre(3), M0, 0.005, 2000, events=FALL, kernel=k)
            for k in ("scan", "native")}


def test_a_terminal_event_is_the_exact_euler_top_s(falls):
    """Time and state within 1e-10 of the closed form; |M|² to 1e-14; the member stops there
    (RESULTS.event_occurred, not a failure), its final state the event's."""
    sol = falls["native"]
    assert sol.failed.size == 0
    assert [sol.result_names[r] for r in sol.result] == ["event_occurred"] * 8
    for i in range(8):
        t_star, m_star = _exact_fall(M0[i])
        assert abs(sol.stats["t_final"][i] - t_star) <= 1e-10 and abs(sol.events.ts[i, 0] - t_star) <= 1e-10
        np.testing.assert_allclose(sol.events.ys[i, 0], m_star, rtol=0, atol=1e-10)
        np.testing.assert_array_equal(sol.final_state[i], sol.events.ys[i, 0])
        assert abs(np.sum(sol.final_state[i] ** 2) - np.sum(M0[i] ** 2)) <= 1e-14 * np.sum(M0[i] ** 2)


def test_every_kernel_stops_at_the_same_event(falls):
    """Scan, native and fused (interpret mode) agree to 1e-12, with equal counts."""
    fused = lpjax.ensemble(RB, lpjax.GaussLegendre(3), M0[:4], 0.005, 2000, events=FALL, kernel="fused")
    runs = {**falls, "fused": fused}
    ref = runs["scan"]
    for k, sol in runs.items():
        n = sol.n_members
        np.testing.assert_array_equal(sol.events.count, ref.events.count[:n])
        np.testing.assert_array_equal(sol.result, ref.result[:n])
        np.testing.assert_allclose(sol.events.ts, ref.events.ts[:n], rtol=0, atol=1e-12)
        np.testing.assert_allclose(sol.final_state, ref.final_state[:n], rtol=0, atol=1e-12)


def test_finished_members_give_their_lanes_up_exactly():
    """The native kernel stops stepping members that a terminal event ended and gives their lanes
    to the next members (a pool of lanes fed from a queue: lanes move, members start at their
    own step 0, each lane keeps its member's row in the caller's arrays): a batched system (its
    arrays read by row) of 40 bodies falling in shuffled order, some after the end, in pools of
    16 lanes and of 1, saved every 50 steps: the same results bit for bit, a stopped member's
    later saves its final state, and the scan kernel's to 1e-12."""
    rng = np.random.default_rng(7)
    systems = eqx.filter_vmap(rigid_body)(jnp.asarray(INERTIA * (1.0 + 0.2 * rng.random(size=(40, 3)))))
    m0 = np.array([1.0, 0.5, 0.3]) * rng.permutation(np.geomspace(0.3, 10.0, 40))[:, None]
    kw = dict(events=FALL, batched_system=True, save_every=50, stats=True)
    runs = {c: lpjax.ensemble(systems, lpjax.GaussLegendre(2), m0, 0.005, 1000,
                              kernel=lpjax.kernels.Native(chunk=c, threads=1), **kw) for c in (16, 1)}
    a, b = runs[16], runs[1]
    fell = a.result == a.result_names.index("event_occurred")
    assert 5 <= np.sum(~fell) <= 20 and np.all(a.result[~fell] == 0) and np.all(a.stats["t_final"][~fell] == 5.0)
    assert len(np.unique(a.stats["t_final"][fell])) == np.sum(fell)
    for x, y in [(a.final_state, b.final_state), (a.observables["state"], b.observables["state"]),
                 (a.events.ts, b.events.ts), (a.events.ys, b.events.ys)] + [(a.stats[k], b.stats[k]) for k in a.stats]:
        np.testing.assert_array_equal(x, y)
    saves = np.arange(1, 21) * 50 * 0.005
    for i in np.flatnonzero(fell):
        after = saves > a.stats["t_final"][i] + 0.005
        np.testing.assert_array_equal(a.observables["state"][i, 1:][after], np.broadcast_to(a.final_state[i], (after.sum(), 3)))
    scan = lpjax.ensemble(systems, lpjax.GaussLegendre(2), m0, 0.005, 1000, kernel="scan", **kw)
    np.testing.assert_array_equal(scan.events.count, a.events.count)
    np.testing.assert_allclose(scan.stats["t_final"], a.stats["t_final"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(scan.observables["state"], a.observables["state"], rtol=0, atol=1e-12)


def test_a_list_of_events_records_which_fired_and_a_store_keeps_them(tmp_path):
    """Γ₁ = 0 upwards (K = 3) and Γ₂ = 0 both ways (K = 4) as one list, into a store: the record
    is, crossing for crossing, the union of the two events run alone (each tagged by ``which``),
    and the reopened store holds it."""
    events = [lpjax.Event(lambda t, y: y[3], 1, False, 3), lpjax.Event(lambda t, y: y[4], 0, False, 4)]
    sol = lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS[:6], 0.02, 500, events=events, out=str(tmp_path / "s"))
    again = lpjax.open_ensemble(str(tmp_path / "s"))
    for a, b in zip(sol.events, again.events):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    alone = [lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS[:6], 0.02, 500, events=e).events for e in events]
    rec = again.events
    assert rec.ts.shape == (6, 7) and rec.ys.shape == (6, 7, 6)
    for i in range(6):
        n = int(rec.count[i])
        got = sorted(zip(rec.which[i, :n].tolist(), rec.ts[i, :n].tolist()))
        want = sorted((e, t) for e in (0, 1) for t in alone[e].ts[i, : int(alone[e].count[i])].tolist())
        assert got == want and n >= 1
    assert again.settings["events"][1]["direction"] == 0 and again.settings["events"][0]["max_crossings"] == 3


def test_events_inside_jit_through_ensemble_function():
    f = lpjax.ensemble_function(RB, lpjax.GaussLegendre(2), 0.01, 500, events=FALL)
    out = f(jnp.asarray(M0))
    ref = lpjax.ensemble(RB, lpjax.GaussLegendre(2), M0, 0.01, 500, events=FALL, kernel="scan")
    np.testing.assert_array_equal(np.asarray(out.stats["event_ts"]), ref.events.ts)
    np.testing.assert_array_equal(np.asarray(out.final_state), ref.final_state)


def test_bad_events_are_refused():
    with pytest.raises(ValueError, match=r"Event: direction must be \+1 \(upwards\), -1 \(downwards\) or 0 \(both\), got 2"):
        lpjax.Event(lambda t, y: y[0], direction=2)
    with pytest.raises(ValueError, match="a terminal event stops at its first crossing: max_crossings must be 1"):
        lpjax.Event(lambda t, y: y[0], max_crossings=3)
    with pytest.raises(ValueError, match="Event: max_crossings must be a positive int, got 0"):
        lpjax.Event(lambda t, y: y[0], terminal=False, max_crossings=0)
    with pytest.raises(TypeError, match="Event: cond must be a function"):
        lpjax.Event(3.0)
    with pytest.raises(TypeError, match="ensemble: events must be an lpjax.Event or a list of them, got function"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, events=[lambda t, y: y[0]])
    with pytest.raises(ValueError, match="integrate: a run with a controller or events starts at t = 0 from a state"):
        lpjax.integrate(RB, lpjax.RK4(), M0[0], 0.01, 10, t0=1.0, events=FALL)


def test_every_method_family_runs_events():
    """RK4, Moser–Veselov, Collective, a composition and the exact-flow splitting: each stops
    where its own trajectory crosses M₂ = 0 (within the step where the run without the event
    changes sign), on the surface to roundoff, with the same state up to there."""
    methods = [lpjax.RK4(), lpjax.MoserVeselov(), lpjax.Collective(lpjax.GaussLegendre(2)),
               lpjax.Composition(lpjax.MoserVeselov(), "triple-jump"),
               lpjax.LiePoissonSplitting.for_system(RB, "exact")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method in methods:
            sol = lpjax.integrate(RB, method, M0[0], 0.005, 2000, events=FALL)
            ys = np.asarray(lpjax.integrate(RB, method, M0[0], 0.005, 2000).ys)
            k = int(np.flatnonzero((ys[:-1, 1] > 0) & (ys[1:, 1] <= 0))[0])  # the step that crosses
            t_event = float(sol.stats["t_final"])
            name = type(method).__name__
            assert lpjax.RESULTS[sol.result] == lpjax.RESULTS[lpjax.RESULTS.event_occurred], name
            assert 0.005 * k < t_event <= 0.005 * (k + 1), name
            assert abs(float(sol.events.ys[0, 1])) <= 1e-12 * np.linalg.norm(M0[0]), name
            np.testing.assert_array_equal(np.asarray(sol.ys[0]), ys[0])


def test_events_with_adaptive_steps():
    """A controller (GL6, rtol = atol = 1e-12): the terminal event of the free rigid body within
    1e-10 of the exact Euler top's, the same in integrate and in the ensemble (native and scan
    kernels to 1e-12, equal step counts); a section of the heavy top against DOP853 (1e-8),
    with the invariants at every crossing to 1e-13."""
    pid = lpjax.PIDController(1e-12, 1e-12)
    sol = lpjax.ensemble(RB, lpjax.GaussLegendre(3), M0, None, t1=20.0, controller=pid, events=FALL)
    scan = lpjax.ensemble(RB, lpjax.GaussLegendre(3), M0, None, t1=20.0, controller=pid, events=FALL, kernel="scan")
    assert sol.failed.size == 0 and [sol.result_names[r] for r in sol.result] == ["event_occurred"] * 8
    np.testing.assert_array_equal(sol.stats["num_accepted_steps"], scan.stats["num_accepted_steps"])
    np.testing.assert_allclose(sol.events.ts, scan.events.ts, rtol=0, atol=1e-12)
    for i in range(8):
        t_star, m_star = _exact_fall(M0[i])
        assert abs(sol.stats["t_reached"][i] - t_star) <= 1e-10 and abs(sol.events.ts[i, 0] - t_star) <= 1e-10
        np.testing.assert_allclose(sol.final_state[i], m_star, rtol=0, atol=1e-10)
    one = lpjax.integrate(RB, lpjax.GaussLegendre(3), M0[2], None, t1=20.0, controller=pid, events=FALL)
    assert abs(float(one.events.ts[0]) - sol.events.ts[2, 0]) <= 1e-12
    assert int(one.stats["num_accepted_steps"]) == sol.stats["num_accepted_steps"][2]
    top = lpjax.ensemble(HT, lpjax.GaussLegendre(3), TOPS[:4], None, t1=20.0, controller=pid, events=SECTION)
    for i in range(4):
        ts, _ = _dop853_crossings(TOPS[i])
        n = int(top.events.count[i])
        assert n == min(10, len(ts))
        np.testing.assert_allclose(top.events.ts[i, :n], ts[:n], rtol=0, atol=1e-8)
        np.testing.assert_allclose(_casimirs(top.events.ys[i, :n]), np.broadcast_to(_casimirs(TOPS[i]), (n, 2)),
                                   rtol=0, atol=1e-13)


def test_a_store_with_events_resumes_bit_for_bit_and_refuses_other_events(tmp_path):
    """Chunks lost from a store with a section resume to the record of an uninterrupted run, bit
    for bit; resuming with other events is refused (the events are in the fingerprint: a lambda
    on another coordinate is another event, by the digest of its code)."""
    import zarr

    kw = dict(events=SECTION, chunk_size=4, kernel="native")
    whole = lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS, 0.02, 500, **kw)
    path = str(tmp_path / "s.zarr")
    lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS, 0.02, 500, out=path, **kw)
    group = zarr.open_group(path, mode="r+")
    group["chunk_done"][1:3] = 0  # chunks 1 and 2 lost: their rows overwritten
    group["stats/event_ts"][4:12] = 0.0
    group["stats/event_count"][4:12] = 0
    resumed = lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS, 0.02, 500, out=path, resume=True, **kw)
    for a, b in zip(resumed.events, whole.events):
        np.testing.assert_array_equal(np.asarray(a[:]), np.asarray(b))
    other = lpjax.Event(lambda t, y: y[4], direction=1, terminal=False, max_crossings=10)
    with pytest.raises(ValueError, match="fingerprint|settings"):
        lpjax.ensemble(HT, lpjax.GaussLegendre(2), TOPS, 0.02, 500, out=path, resume=True, **{**kw, "events": other})
