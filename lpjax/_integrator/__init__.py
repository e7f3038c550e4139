from ._base import (
    AbstractAdjointPair as AbstractAdjointPair,
    AbstractGroupMap as AbstractGroupMap,
    AbstractSteppedAdjoint as AbstractSteppedAdjoint,
    AbstractIntegrator as AbstractIntegrator,
    AbstractStateIsY as AbstractStateIsY,
    RESULTS as RESULTS,
    StepInfo as StepInfo,
)
from ._implicit import AbstractImplicitMethod as AbstractImplicitMethod
from .gauss_legendre import (
    GaussLegendre as GaussLegendre,
    GaussLegendreState as GaussLegendreState,
    gauss_legendre_tableau as gauss_legendre_tableau,
)
from .rk4 import RK4 as RK4
from .adjoint import Adjoint as Adjoint
from .collective import Collective as Collective, DualPairFamily as DualPairFamily
from .moser_veselov import MoserVeselov as MoserVeselov
from .suris import SurisClebsch as SurisClebsch, SurisLagrangeTop as SurisLagrangeTop
from .discrete_euler_poincare import DiscreteEulerPoincare as DiscreteEulerPoincare
from .projected import Projected as Projected, ProjectableFamily as ProjectableFamily
from .composition import COMPOSITION_SCHEMES as COMPOSITION_SCHEMES, Composition as Composition
from .splitting import LiePoissonSplitting as LiePoissonSplitting
from .processed import Processed as Processed
from ._schemes import PROCESSED_SCHEMES as PROCESSED_SCHEMES, SPLITTING_SCHEMES as SPLITTING_SCHEMES
from ._stochastic import AbstractStochasticIntegrator as AbstractStochasticIntegrator
from .stochastic_midpoint import StochasticMidpoint as StochasticMidpoint
from .noise_splitting import NoiseSplitting as NoiseSplitting
