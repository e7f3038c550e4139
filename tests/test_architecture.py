"""The core's contracts: one implicit kernel, structural dispatch, integrate compiled once,
abstract-or-final modules, and the import rules of the layers."""

import ast
import inspect
import pathlib
import subprocess
import sys
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.algebras import euclidean, so3
from lpjax.systems import clebsch_case, lagrange_top, rigid_body

PKG = pathlib.Path(lpjax.__file__).parent
INERTIA = jnp.array([1.0, 2.0, 3.0])
M0 = jnp.array([1.0, 0.5, 0.8])


# ------------------------------------------------------------------ families outside the zoo


class MyRigidBody(lpjax.AbstractFreeRigidBody):
    """A user's Euler top, written against the family only."""

    moments: jax.Array

    @property
    def mass_tensor(self):
        return 0.5 * jnp.sum(self.moments) - self.moments

    def __call__(self, M):
        return 0.5 * jnp.sum(M**2 / self.moments)


class MyLagrangeTop(lpjax.AbstractLagrangeTop):
    alpha: jax.Array
    p: jax.Array
    frame: ClassVar[str] = "rest"

    @property
    def n(self):
        return self.p.shape[0]

    @property
    def gravity(self):
        return self.p

    def __call__(self, y):
        d = self.n * (self.n - 1) // 2
        return 0.5 * jnp.dot(y[:d], y[:d]) + jnp.dot(y[d:], self.p)


class MyClebschFlow(lpjax.AbstractClebschFlow):
    B: jax.Array

    def __call__(self, y):
        d = self.B.shape[0] * (self.B.shape[0] - 1) // 2
        return 0.5 * jnp.dot(y[:d], y[:d]) - 0.5 * jnp.dot(self.B * y[d:], y[d:])


def test_user_rigid_body_steps_with_moser_veselov_like_the_zoo():
    mine = lpjax.LiePoissonSystem(so3(), MyRigidBody(INERTIA), -1)
    method = lpjax.MoserVeselov(reconstruct=True)
    a = lpjax.integrate(mine, method, M0, 0.1, 500, save_every=50)
    b = lpjax.integrate(rigid_body(INERTIA), method, M0, 0.1, 500, save_every=50)
    assert float(jnp.max(jnp.abs(a.ys - b.ys))) <= 1e-15
    assert float(jnp.max(jnp.abs(a.gs.R - b.gs.R))) <= 1e-15
    assert isinstance(a.gs, lpjax.groups.SO3) and a.gs.R.shape == (11, 3, 3)


def test_user_lagrange_top_and_clebsch_flow_step_with_suris_maps():
    p = jnp.array([0.0, 0.2, 1.0])
    zoo = lagrange_top(3, 0.5, "rest", p=p)
    mine = lpjax.LiePoissonSystem(euclidean(3), MyLagrangeTop(jnp.asarray(0.5), p), 1)
    y0 = jnp.array([0.3, -0.2, 0.5, 0.1, 0.4, 0.9])
    a = lpjax.integrate(mine, lpjax.SurisLagrangeTop(), y0, 0.05, 200).ys
    b = lpjax.integrate(zoo, lpjax.SurisLagrangeTop(), y0, 0.05, 200).ys
    assert float(jnp.max(jnp.abs(a - b))) <= 1e-15
    B = jnp.array([0.5, 1.0, 1.7])
    mine = lpjax.LiePoissonSystem(euclidean(3), MyClebschFlow(B), -1)
    a = lpjax.integrate(mine, lpjax.SurisClebsch(), y0, 0.1, 200).ys
    b = lpjax.integrate(clebsch_case(B), lpjax.SurisClebsch(), y0, 0.1, 200).ys
    assert float(jnp.max(jnp.abs(a - b))) <= 1e-15


def test_system_outside_a_family_gets_an_error_naming_the_family():
    plain = lpjax.LiePoissonSystem(so3(), lambda M: 0.5 * jnp.sum(M**2 / INERTIA), -1)
    with pytest.raises(TypeError, match="MoserVeselov steps only the free rigid body.*AbstractFreeRigidBody"):
        lpjax.integrate(plain, lpjax.MoserVeselov(), M0, 0.1, 2)
    with pytest.raises(TypeError, match="SurisLagrangeTop steps only the Lagrange top.*AbstractLagrangeTop"):
        lpjax.integrate(rigid_body(INERTIA), lpjax.SurisLagrangeTop(), M0, 0.1, 2)
    with pytest.raises(TypeError, match="SurisClebsch steps only the Clebsch flow"):
        lpjax.integrate(clebsch_case(jnp.ones(3), 2 * jnp.ones((3, 3))), lpjax.SurisClebsch(), jnp.ones(6), 0.1, 2)
    rest_frame = lpjax.LiePoissonSystem(so3(), MyRigidBody(INERTIA), 1)
    with pytest.raises(TypeError, match=r"uses the \(\+\) bracket"):
        lpjax.integrate(rest_frame, lpjax.MoserVeselov(), M0, 0.1, 2)
    with pytest.raises(TypeError, match="so\\(n\\)"):
        lpjax.integrate(lpjax.CanonicalSystem(lambda y: y @ y), lpjax.DiscreteEulerPoincare(lambda W, P, dt: 0.0), jnp.ones(2), 0.1, 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: lpjax.GaussLegendre(2, **kw),
        lambda **kw: lpjax.GaussLegendre(2, solver="fixed_point", **kw),
        lambda **kw: lpjax.MoserVeselov(**kw),
        lambda **kw: lpjax.DiscreteEulerPoincare(lambda W, P, dt: -jnp.trace(W) / dt, **kw),
        lambda **kw: lpjax.Collective(lpjax.GaussLegendre(2, **kw)),
    ],
    ids=["GL-newton", "GL-fixed-point", "MoserVeselov", "DEP", "Collective"],
)
def test_every_implicit_method_validates_max_iters_and_tol(make):
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_iters must be a positive integer"):
            make(max_iters=bad)
    for bad in (0.0, -1e-12, float("nan"), float("inf"), "1e-12"):
        with pytest.raises(ValueError, match="tol must be a positive finite float"):
            make(tol=bad)
    make(max_iters=3, tol=1e-10)  # valid settings construct


def test_nonconvergence_is_the_same_result_code_for_every_implicit_method():
    system = rigid_body(INERTIA)
    for method in (lpjax.GaussLegendre(2, max_iters=1), lpjax.MoserVeselov(max_iters=1),
                   lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(system), max_iters=1)):
        sol = lpjax.integrate(system, method, 3 * M0, 0.5, 4, throw=False)
        assert sol.result == lpjax.RESULTS.implicit_solve_failed
        assert int(sol.stats["num_failed_steps"]) == 4


# ------------------------------------------------------------------ integrate compiled once


class _CountingBody(eqx.Module):
    """Counts how often it is traced: Python runs ``__call__`` only while tracing."""

    inertia: jax.Array
    calls = [0]

    def __call__(self, M):
        self.calls[0] += 1
        return 0.5 * jnp.sum(M * M / self.inertia)


@pytest.mark.parametrize("method", [lpjax.RK4(), lpjax.GaussLegendre(2)], ids=["RK4", "GL4"])
def test_second_integrate_call_with_new_arrays_does_not_retrace(method, caplog):
    """New arrays reuse integrate's program (the Hamiltonian is not traced again, and nothing
    is compiled); a new n_steps compiles integrate anew."""
    calls = _CountingBody.calls
    system = lpjax.LiePoissonSystem(so3(), _CountingBody(INERTIA), -1)

    def compiles(*args, **kwargs):
        caplog.clear()
        with jax.log_compiles(True):
            sol = lpjax.integrate(*args, **kwargs)
        return sol, sum("Compiling jit(_integrate)" in r.getMessage() for r in caplog.records)

    first, n_first = compiles(system, method, M0, 0.1, 20, save_every=5)
    traced = calls[0]
    assert traced > 0 and n_first == 1
    new_system = lpjax.LiePoissonSystem(so3(), _CountingBody(INERTIA * 1.5), -1)
    second, n_second = compiles(new_system, method, 2 * M0, 0.05, 20, save_every=5, t0=1.0)
    assert calls[0] == traced and n_second == 0  # new y0, dt, t0 and parameters: no retrace
    assert not np.allclose(first.ys, second.ys)
    _, n_third = compiles(system, method, M0, 0.1, 40, save_every=5)
    assert n_third == 1  # a new n_steps is a new configuration


# ------------------------------------------------------------------ layout and class rules


def _modules():
    return sorted(PKG.rglob("*.py"))


def _imported(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            yield "." * node.level + base, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def test_integrators_never_import_the_model_zoo():
    for path in (PKG / "_integrator").glob("*.py"):
        for module, names in _imported(path):
            assert "systems" not in module.split(".") and "systems" not in names, (path.name, module)


def test_custom_root_is_called_in_one_file():
    users = [p.relative_to(PKG).as_posix() for p in _modules() if "custom_root" in p.read_text()]
    assert users == ["_integrator/_implicit.py"]


def test_importing_lpjax_does_not_import_matplotlib():
    code = "import lpjax, lpjax.systems, lpjax.diagnostics, sys; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_package_file_is_longer_than_about_400_lines():
    long = {p.name: n for p in _modules() if (n := len(p.read_text().splitlines())) > 420}
    assert not long


def _lpjax_modules_classes():
    seen = {}
    for name, mod in list(sys.modules.items()):
        if name == "lpjax" or name.startswith("lpjax."):
            for obj in vars(mod).values():
                if inspect.isclass(obj) and issubclass(obj, eqx.Module) and obj.__module__.startswith("lpjax"):
                    seen[obj.__qualname__, obj.__module__] = obj
    return list(seen.values())


def test_every_module_class_is_abstract_or_final():
    """No lpjax class subclasses a concrete lpjax class, and no concrete method is overridden."""
    classes = _lpjax_modules_classes()
    assert len(classes) > 30
    for cls in classes:
        for base in cls.__mro__[1:]:
            if not base.__module__.startswith("lpjax") or base is cls:
                continue
            assert base.__name__.startswith("Abstract"), f"{cls.__name__} subclasses concrete {base.__name__}"
            for name, attr in vars(base).items():
                if name.startswith("__") or getattr(attr, "__isabstractmethod__", False):
                    continue
                if not (inspect.isfunction(attr) or isinstance(attr, property)):
                    continue
                for sub in cls.__mro__[: cls.__mro__.index(base)]:
                    assert name not in vars(sub), f"{sub.__name__}.{name} overrides concrete {base.__name__}.{name}"
