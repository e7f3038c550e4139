"""The closed-form Euler top, now public as :mod:`lpjax.exact`; re-exported for the tests."""

from lpjax.exact import (
    euler_top_energy_casimir as euler_top_energy_casimir,
    euler_top_exact as euler_top_exact,
    euler_top_period as euler_top_period,
)

__all__ = ["euler_top_exact", "euler_top_period", "euler_top_energy_casimir"]
