"""Reduced discrete Lagrangians for :class:`lpjax.DiscreteEulerPoincare`.

Which fits which system (the documentation's Concepts page has the full table):

* :func:`moser_veselov`: a free rigid body (:class:`lpjax.AbstractFreeRigidBody`);
* :func:`suris_lagrange_top`, :func:`suris_clebsch`: the Lagrange top, the Clebsch flow ``c_jk = 1``;
* :func:`heavy_top`: ``heavy_top``, ``heavy_top_n``;
* :func:`kirchhoff`: ``clebsch_case`` (a diagonal inertia; any ``C`` for n = 3), not a general
  coupled mass matrix;
* :func:`midpoint`: any Hamiltonian quadratic in the group's momentum, a general coupled
  Kirchhoff body included; :func:`movable_base_top` is it for the movable-base top.
"""

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
