"""Model zoo of Lie–Poisson systems."""

from ._heavy_top import (
    HeavyTopHamiltonian as HeavyTopHamiltonian,
    HeavyTopNHamiltonian as HeavyTopNHamiltonian,
    heavy_top as heavy_top,
    heavy_top_n as heavy_top_n,
)
from ._rigid_body import (
    RigidBodyHamiltonian as RigidBodyHamiltonian,
    RigidBodyNHamiltonian as RigidBodyNHamiltonian,
    rigid_body as rigid_body,
    rigid_body_n as rigid_body_n,
)
from ._stochastic import (
    stochastic_heavy_top as stochastic_heavy_top,
    stochastic_rigid_body as stochastic_rigid_body,
)
from ._kida import (
    KidaHamiltonian as KidaHamiltonian,
    kida_initial_state as kida_initial_state,
    kida_lambda_phi_from_mu as kida_lambda_phi_from_mu,
    kida_mu_from_lambda_phi as kida_mu_from_lambda_phi,
    kida_vortex as kida_vortex,
)
from ._movable_base import (
    MovableBaseHamiltonian as MovableBaseHamiltonian,
    movable_base_mu as movable_base_mu,
    movable_base_rho_c as movable_base_rho_c,
    movable_base_top as movable_base_top,
    movable_base_top_x3 as movable_base_top_x3,
    MovableBaseX3Hamiltonian as MovableBaseX3Hamiltonian,
)
from ._lagrange_top import (
    LagrangeTopMovingHamiltonian as LagrangeTopMovingHamiltonian,
    LagrangeTopRestHamiltonian as LagrangeTopRestHamiltonian,
    lagrange_top as lagrange_top,
)
from ._clebsch_case import (
    ClebschFlowHamiltonian as ClebschFlowHamiltonian,
    ClebschHamiltonian as ClebschHamiltonian,
    clebsch_case as clebsch_case,
    clebsch_condition as clebsch_condition,
)
from ._coupled_lr import (
    AbelianCoupledLRSystem as AbelianCoupledLRSystem,
    AbstractCoupledLRSystem as AbstractCoupledLRSystem,
    abelian_coupled_lr as abelian_coupled_lr,
    CoupledLRSystem as CoupledLRSystem,
    LPlusRMetric as LPlusRMetric,
    coupled_lr as coupled_lr,
    lplusr_geodesic as lplusr_geodesic,
)
from ._neumann import (
    NeumannSystem as NeumannSystem,
    neumann as neumann,
    neumann_coordinates as neumann_coordinates,
    neumann_state as neumann_state,
)
from ._nonholonomic import (
    chaplygin_sphere as chaplygin_sphere,
    lplusr as lplusr,
    rubber_chaplygin_sphere as rubber_chaplygin_sphere,
    spherical_support as spherical_support,
    veselova as veselova,
    veselova_n as veselova_n,
)
