"""Reduced discrete Lagrangians for :class:`lpjax.DiscreteEulerPoincare`."""

from ._lagrangians import (
    SplitLagrangian as SplitLagrangian,
    heavy_top as heavy_top,
    kirchhoff as kirchhoff,
    MidpointLagrangian as MidpointLagrangian,
    midpoint as midpoint,
    movable_base_top as movable_base_top,
    MoserVeselovLagrangian as MoserVeselovLagrangian,
    SurisClebschLagrangian as SurisClebschLagrangian,
    SurisLagrangeTopLagrangian as SurisLagrangeTopLagrangian,
    moser_veselov as moser_veselov,
    suris_clebsch as suris_clebsch,
    suris_lagrange_top as suris_lagrange_top,
)
from ._integrator.discrete_euler_poincare import legendre as legendre
