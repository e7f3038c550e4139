"""Diagnostics (public namespace)."""

from ._diagnostics import empirical_order as empirical_order, relative_invariant_error as relative_invariant_error
