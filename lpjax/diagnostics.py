"""Diagnostics (public namespace)."""

from ._diagnostics import (
    empirical_order as empirical_order,
    poisson_defect as poisson_defect,
    relative_invariant_error as relative_invariant_error,
)
