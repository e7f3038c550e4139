from ._base import (
    AbstractGroupMap as AbstractGroupMap,
    AbstractIntegrator as AbstractIntegrator,
    RESULTS as RESULTS,
    StepInfo as StepInfo,
)
from .gauss_legendre import GaussLegendre as GaussLegendre, gauss_legendre_tableau as gauss_legendre_tableau
from .rk4 import RK4 as RK4
from .collective import Collective as Collective
from .moser_veselov import MoserVeselov as MoserVeselov
from .suris import SurisClebsch as SurisClebsch, SurisLagrangeTop as SurisLagrangeTop
from .discrete_euler_poincare import DiscreteEulerPoincare as DiscreteEulerPoincare
