"""Diagnostics (public namespace)."""

from ._diagnostics import (
    divergence_defect as divergence_defect,
    empirical_order as empirical_order,
    measure_defect as measure_defect,
    poisson_defect as poisson_defect,
    relative_invariant_error as relative_invariant_error,
)
from ._lax import (
    charpoly as charpoly,
    lax_invariants as lax_invariants,
    suris_clebsch_lax as suris_clebsch_lax,
    suris_lagrange_lax as suris_lagrange_lax,
)
from .systems._clebsch_case import clebsch_lax as clebsch_lax
from ._integrator.discrete_euler_poincare import group_casimir as group_casimir
