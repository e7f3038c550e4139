"""Diagnostics (public namespace)."""

from ._diagnostics import (
    empirical_order as empirical_order,
    poisson_defect as poisson_defect,
    relative_invariant_error as relative_invariant_error,
)
from ._lax import (
    charpoly as charpoly,
    lax_invariants as lax_invariants,
    suris_clebsch_lax as suris_clebsch_lax,
    suris_lagrange_lax as suris_lagrange_lax,
)
