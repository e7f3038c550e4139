"""The native kernel's rules, one per primitive (``lpjax._ensemble._kernels._native._rules.RULES``),
each run by the compiled kernel on edge values and compared with XLA:CPU running the same
function: ±0, ±inf, NaN, subnormals (both flush them to zero), the extremes of the integers,
integer division by zero; float32 and float64, int32 and int64.

Exact operations (arithmetic, comparisons, selects, conversions, rounding, sqrt) agree with XLA
bit for bit (any NaN for a NaN). The C library's functions (and ``pow``, ``atan2``) are compared
with NumPy's and SciPy's in float64 on the flushed operands, rounded and flushed: NaN, ±inf and
the sign of a zero equal, the rest to 4 ulp. XLA's own polynomials are no reference there on
edge values (measured: float32 ``atan2`` of two subnormals is NaN, ``cbrt`` of the smallest
subnormal −5.6e-16, ``lgamma(1)`` 4.8e-7, ``pow(0, −5e-324)`` inf). ``rsqrt`` and ``logistic``
(the kernel's ``1 / sqrt`` and ``1 / (1 + exp(−x))``) agree with XLA's to 4 ulp. A select of a
subnormal operand gives one of its operands, bit for bit or flushed to ±0: XLA itself gives
either operand, by its fusion (measured: ``where(x < y, x, y)`` at (0, 5e-324) is 0.0 alone and
5e-324 when ``x < y`` is returned too). Every rule of the registry is tested here (a test checks the list against the
registry).

The programs are built per input kind and dtype (a handful of kernels), one observable per rule.
"""

import functools
from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.ad_util import add_jaxvals_p

pytest.importorskip("llvmlite")

from lpjax._ensemble._kernels._native._rules import RULES  # noqa: E402
from lpjax._ensemble._kernels._native._run import run_native_host  # noqa: E402
from lpjax.kernels import Native  # noqa: E402

_LIBM = ("exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p erf erfc lgamma exp2 "
         "cbrt").split()


def _floats(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal, -info.smallest_subnormal, info.tiny, 1.0, -1.0,
         0.5, -1.5, 2.5, 3.0, -7.25, 0.75, info.max, -info.max]
    return np.array(v, dtype)


def _ints(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.array([0, 1, -1, 3, -7, 31, 64, info.min, info.max], dtype)


def _pairs(values: np.ndarray) -> np.ndarray:
    x, y = np.meshgrid(values, values, indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=1)


# each rule's probe: (kind, function of the operands); kind "f": floats x, y; "i": integers i, j
def _select3(i, j):
    return lax.select_n(jnp.clip(i, 0, 2).astype(jnp.int32), i, j, i * j)


PROBES = {
    "add": [("f", lambda x, y: x + y), ("i", lambda i, j: i + j)],
    "add_any": [("f", lambda x, y: add_jaxvals_p.bind(x, y))],
    "sub": [("f", lambda x, y: x - y), ("i", lambda i, j: i - j)],
    "mul": [("f", lambda x, y: x * y), ("i", lambda i, j: i * j)],
    "div": [("f", lambda x, y: x / y), ("i", lambda i, j: lax.div(i, j))],
    "rem": [("f", lambda x, y: lax.rem(x, y)), ("i", lambda i, j: lax.rem(i, j))],
    "max": [("f", lambda x, y: lax.max(x, y)), ("i", lambda i, j: lax.max(i, j)),
            ("i", lambda i, j: lax.max(i > 0, j > 0))],
    "min": [("f", lambda x, y: lax.min(x, y)), ("i", lambda i, j: lax.min(i, j)),
            ("i", lambda i, j: lax.min(i > 0, j > 0))],
    "neg": [("f", lambda x, y: -x), ("i", lambda i, j: -i)],
    "abs": [("f", lambda x, y: jnp.abs(x)), ("i", lambda i, j: lax.abs(i))],
    "sign": [("f", lambda x, y: lax.sign(x)), ("i", lambda i, j: lax.sign(i))],
    "eq": [("f", lambda x, y: x == y), ("i", lambda i, j: i == j)],
    "ne": [("f", lambda x, y: x != y), ("i", lambda i, j: i != j)],
    "lt": [("f", lambda x, y: x < y), ("i", lambda i, j: i < j)],
    "le": [("f", lambda x, y: x <= y), ("i", lambda i, j: i <= j)],
    "gt": [("f", lambda x, y: x > y), ("i", lambda i, j: i > j)],
    "ge": [("f", lambda x, y: x >= y), ("i", lambda i, j: i >= j)],
    "and": [("i", lambda i, j: i & j), ("i", lambda i, j: (i > 0) & (j < 3))],
    "or": [("i", lambda i, j: i | j), ("i", lambda i, j: (i > 0) | (j < 3))],
    "xor": [("i", lambda i, j: i ^ j), ("i", lambda i, j: (i > 0) ^ (j < 3))],
    "not": [("i", lambda i, j: ~i), ("i", lambda i, j: ~(i > j))],
    "select_n": [("f", lambda x, y: jnp.where(x < y, x, y)), ("i", _select3)],
    "clamp": [("f", lambda x, y: lax.clamp(jnp.asarray(-1.0, x.dtype), x, y)),
              ("i", lambda i, j: lax.clamp(jnp.asarray(-3, i.dtype), i, j))],
    "integer_pow": [("f", lambda x, y: lax.integer_pow(x, 5)), ("f", lambda x, y: lax.integer_pow(x, -3)),
                    ("i", lambda i, j: lax.integer_pow(i, 3))],
    "square": [("f", lambda x, y: lax.square(x)), ("i", lambda i, j: lax.square(i))],
    "shift_left": [("i", lambda i, j: lax.shift_left(i, jnp.clip(j, 0, 31)))],
    "shift_right_arithmetic": [("i", lambda i, j: lax.shift_right_arithmetic(i, jnp.clip(j, 0, 31)))],
    "shift_right_logical": [("i", lambda i, j: lax.shift_right_logical(i, jnp.clip(j, 0, 31)))],
    "is_finite": [("f", lambda x, y: jnp.isfinite(x)), ("f", lambda x, y: jnp.isfinite(x) & jnp.isfinite(y))],
    "sqrt": [("f", lambda x, y: jnp.sqrt(x))],
    "rsqrt": [("f", lambda x, y: lax.rsqrt(x))],
    "floor": [("f", lambda x, y: jnp.floor(x))],
    "ceil": [("f", lambda x, y: jnp.ceil(x))],
    "round": [("f", lambda x, y: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)),
              ("f", lambda x, y: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO))],
    "logistic": [("f", lambda x, y: lax.logistic(x))],
    "pow": [("f", lambda x, y: lax.pow(x, y))],
    "atan2": [("f", lambda x, y: lax.atan2(x, y))],
    "nextafter": [("f", lambda x, y: lax.nextafter(x, y))],
    "copy": [("f", lambda x, y: lax.copy_p.bind(x))],
    "stop_gradient": [("f", lambda x, y: lax.stop_gradient(x) * y)],
    "reduce_precision": [("f", lambda x, y: lax.reduce_precision(x, *_bits(x.dtype)))],
    "convert_element_type": [("f", lambda x, y: x.astype(jnp.int32)), ("f", lambda x, y: x.astype(jnp.float32)),
                             ("f", lambda x, y: x.astype(bool)), ("i", lambda i, j: i.astype(jnp.float64)),
                             ("i", lambda i, j: i.astype(jnp.int8)), ("i", lambda i, j: i.astype(jnp.uint32))],
    **{name: [("f", functools.partial(lambda f, x, y: f(x), getattr(lax, name)))] for name in _LIBM},
}
_NUMPY = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
          "atanh": "arctanh", "pow": "power", "atan2": "arctan2"}
LIBRARY = set(_LIBM) | {"pow", "atan2"}  # against NumPy and SciPy
EXACT = set(PROBES) - LIBRARY - {"logistic", "rsqrt"}  # against XLA, bit for bit (the rest: to 4 ulp)


def _library(name: str) -> Callable:
    if name in ("erf", "erfc", "lgamma"):
        import scipy.special

        lgamma = lambda x: np.where(x == -np.inf, np.inf, scipy.special.gammaln(x))  # noqa: E731 (C: lgamma(−inf) = inf)
        return {"erf": scipy.special.erf, "erfc": scipy.special.erfc, "lgamma": lgamma}[name]
    return getattr(np, _NUMPY.get(name, name))


def _flush(v: np.ndarray) -> np.ndarray:
    """Subnormals to ±0, as the kernel (and XLA:CPU) treat them."""
    return np.where(np.abs(v) < np.finfo(v.dtype).tiny, np.copysign(np.zeros_like(v), v), v)


def _bits(dtype) -> tuple:
    info = np.finfo(dtype)
    return info.nexp, info.nmant


class _Probe(eqx.Module):
    """A member program whose observable is every probe of one kind on the member's operands:
    floats from its state, integers from its share of the (batched) system arrays."""

    fns: tuple = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    n_steps: ClassVar[int] = 1
    save_every: ClassVar[int] = 1
    sorts: ClassVar[bool] = False

    def init(self, dyn, y0):
        return y0

    def step(self, dyn, carry):
        return carry

    def observe(self, dyn, carry):
        a, b = (carry[0], carry[1]) if self.kind == "f" else (dyn[0], dyn[1])
        return tuple(fn(a, b) for fn in self.fns)

    def summary(self, dyn, carry):
        return carry, jnp.zeros((), jnp.int32), {}

    def finished(self, dyn, carry):
        return None


def _probes(kind: str) -> list:
    return [(name, k) for name, cases in PROBES.items() for k, (kd, _) in enumerate(cases) if kd == kind]


@functools.cache
def _results(kind: str, dtype: str) -> dict:
    """``{(rule, k): (native, xla)}`` for every probe of ``kind`` on the edge values of ``dtype``."""
    dtype = np.dtype(dtype)
    keys = _probes(kind)
    fns = tuple(PROBES[name][k][1] for name, k in keys)
    member = _Probe(fns, kind)
    if kind == "f":
        y0s, dyn = _pairs(_floats(dtype)), np.zeros((1, 2), np.int32)
        xla = jax.jit(jax.vmap(lambda y: member.observe(None, y)))(jnp.asarray(y0s))
        dyn = np.zeros((len(y0s), 2), np.int32)
    else:
        dyn = _pairs(_ints(dtype))
        y0s = np.zeros((len(dyn), 2), np.float64)
        xla = jax.jit(jax.vmap(lambda i: member.observe(i, None)))(jnp.asarray(dyn))
    _, saved = run_native_host(member, jnp.asarray(dyn), y0s, 1, True, Native())
    out = {key: (np.asarray(n)[:, 0], np.asarray(x)) for key, n, x in zip(keys, saved, xla)}
    out["operands"] = y0s if kind == "f" else dyn
    return out


def _same(native: np.ndarray, xla: np.ndarray, exact: bool) -> None:
    assert native.dtype == xla.dtype and native.shape == xla.shape
    if native.dtype.kind != "f":
        np.testing.assert_array_equal(native, xla)
        return
    nan = np.isnan(xla)
    np.testing.assert_array_equal(np.isnan(native), nan)
    n, x = native[~nan], xla[~nan]
    if exact:
        np.testing.assert_array_equal(n.view(f"u{n.itemsize}"), x.view(f"u{x.itemsize}"))  # ±0 told apart
        return
    special = ~np.isfinite(x) | (x == 0)
    np.testing.assert_array_equal(n[special].view(f"u{n.itemsize}"), x[special].view(f"u{x.itemsize}"))
    np.testing.assert_allclose(n[~special], x[~special], rtol=4 * np.finfo(x.dtype).eps, atol=0)


CASES = [(name, k, kind, dt) for name, cases in PROBES.items() for k, (kind, _) in enumerate(cases)
         for dt in (("float32", "float64") if kind == "f" else ("int32", "int64"))]


@pytest.mark.parametrize("name, k, kind, dtype", CASES, ids=[f"{n}-{k}-{dt}" for n, k, _, dt in CASES])
def test_each_rule_on_edge_values(name, k, kind, dtype):
    results = _results(kind, dtype)
    native, xla = results[name, k]
    operands = results["operands"]
    if name in LIBRARY:
        x = _flush(operands).astype(np.float64)
        with np.errstate(all="ignore"):
            ref = _library(name)(*([x[:, 0], x[:, 1]] if name in ("pow", "atan2") else [x[:, 0]]))
        with np.errstate(over="ignore"):  # (a float64 result beyond the float32 range: inf, as the kernel)
            ref = _flush(ref.astype(dtype))
        _same(native, ref, exact=False)
        return
    if name == "select_n" and kind == "f":  # a subnormal operand: one of the operands
        sub = np.any((operands != 0) & (np.abs(operands) < np.finfo(dtype).tiny), axis=1)
        bits = lambda a: a.view(f"u{a.itemsize}")  # noqa: E731
        picks = [bits(np.ascontiguousarray(v[sub, j])) for v in (operands, _flush(operands)) for j in (0, 1)]
        assert np.all(np.any([bits(native[sub]) == p for p in picks], axis=0))
        native, xla = native[~sub], xla[~sub]
    _same(native, xla, name in EXACT)


def test_every_rule_is_tested_and_there_are_many():
    assert set(PROBES) == set(RULES)
    assert len(RULES) >= 25


def test_integer_division_by_zero_is_xla_s():
    """x / 0 = −1 and x % 0 = x, as XLA defines them (and INT_MIN / −1 = INT_MIN)."""
    for dtype in ("int32", "int64"):
        i, j = _pairs(_ints(np.dtype(dtype))).T
        div, _ = _results("i", dtype)["div", 1]
        rem, _ = _results("i", dtype)["rem", 1]
        assert np.all(div[j == 0] == -1) and np.all(rem[j == 0] == i[j == 0])
        low = (i == np.iinfo(dtype).min) & (j == -1)
        assert np.all(div[low] == np.iinfo(dtype).min)
