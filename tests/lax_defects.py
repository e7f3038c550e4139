"""One step of a map against two Lax matrices: the shared check of Theorems 7 and 10."""

import jax
import jax.numpy as jnp

import lpjax
from lpjax.diagnostics import lax_invariants


def one_step_lax_defects(system, method, laxes, eps, lams):
    """A jitted ``y ↦ [defect of each lax]``: the worst relative change over ``lams`` of the
    characteristic-polynomial coefficients of ``lax(y, lam)`` across one step of ``method``."""

    @jax.jit
    def defects(y):
        y1 = lpjax.integrate(system, method, y, eps, 1).ys[-1]
        out = []
        for lax in laxes:
            c0, c1 = lax_invariants(lax, y, lams), lax_invariants(lax, y1, lams)
            out.append(jnp.max(jnp.max(jnp.abs(c1 - c0), axis=1) / jnp.max(jnp.abs(c0), axis=1)))  # worst λ
        return jnp.stack(out)

    return defects
