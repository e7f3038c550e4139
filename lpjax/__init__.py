"""lpjax: structure-preserving, differentiable integrators for Lie–Poisson systems."""

from . import (
    algebras as algebras,
    clebsch as clebsch,
    diagnostics as diagnostics,
    groups as groups,
    lagrangians as lagrangians,
    systems as systems,
)
from ._integrate import Solution as Solution, integrate as integrate
from ._integrator import (
    AbstractGroupMap as AbstractGroupMap,
    AbstractIntegrator as AbstractIntegrator,
    DiscreteEulerPoincare as DiscreteEulerPoincare,
    Collective as Collective,
    GaussLegendre as GaussLegendre,
    MoserVeselov as MoserVeselov,
    RESULTS as RESULTS,
    RK4 as RK4,
    StepInfo as StepInfo,
    SurisClebsch as SurisClebsch,
    SurisLagrangeTop as SurisLagrangeTop,
)
from ._system import (
    AbstractSystem as AbstractSystem,
    CanonicalSystem as CanonicalSystem,
    LiePoissonSystem as LiePoissonSystem,
)

__version__ = "0.1.0"
