"""lpjax: structure-preserving, differentiable integrators for Lie–Poisson systems."""

from . import (
    algebras as algebras,
    clebsch as clebsch,
    control as control,
    diagnostics as diagnostics,
    fit as fit,
    groups as groups,
    kernels as kernels,
    lagrangians as lagrangians,
    systems as systems,
)
from ._ensemble import (
    EnsembleOutput as EnsembleOutput,
    EnsembleSolution as EnsembleSolution,
    ensemble as ensemble,
    ensemble_function as ensemble_function,
    open_ensemble as open_ensemble,
    spread_states as spread_states,
)
from ._controller import PIDController as PIDController
from ._events import Event as Event, EventRecord as EventRecord
from ._integrate import Solution as Solution, integrate as integrate
from ._tangents import FLI as FLI, Lyapunov as Lyapunov, MEGNO as MEGNO
from ._version import __version__ as __version__
from ._integrator import (
    AbstractAdjointPair as AbstractAdjointPair,
    Adjoint as Adjoint,
    AbstractGroupMap as AbstractGroupMap,
    AbstractImplicitMethod as AbstractImplicitMethod,
    AbstractSteppedAdjoint as AbstractSteppedAdjoint,
    AbstractIntegrator as AbstractIntegrator,
    AbstractStochasticIntegrator as AbstractStochasticIntegrator,
    COMPOSITION_SCHEMES as COMPOSITION_SCHEMES,
    Composition as Composition,
    DiscreteEulerPoincare as DiscreteEulerPoincare,
    Collective as Collective,
    GaussLegendre as GaussLegendre,
    GaussLegendreState as GaussLegendreState,
    LiePoissonSplitting as LiePoissonSplitting,
    MoserVeselov as MoserVeselov,
    NoiseSplitting as NoiseSplitting,
    Projected as Projected,
    Processed as Processed,
    PROCESSED_SCHEMES as PROCESSED_SCHEMES,
    SPLITTING_SCHEMES as SPLITTING_SCHEMES,
    RESULTS as RESULTS,
    RK4 as RK4,
    StepInfo as StepInfo,
    StochasticMidpoint as StochasticMidpoint,
    SurisClebsch as SurisClebsch,
    SurisLagrangeTop as SurisLagrangeTop,
)
from ._system import (
    AbstractClebschFlow as AbstractClebschFlow,
    AbstractFamily as AbstractFamily,
    AbstractFreeRigidBody as AbstractFreeRigidBody,
    AbstractLagrangeTop as AbstractLagrangeTop,
    AbstractLiePoissonSystem as AbstractLiePoissonSystem,
    AbstractSystem as AbstractSystem,
    CanonicalSystem as CanonicalSystem,
    LiePoissonSystem as LiePoissonSystem,
    Hamiltonized as Hamiltonized,
    NonholonomicSystem as NonholonomicSystem,
    StochasticLiePoissonSystem as StochasticLiePoissonSystem,
    hamiltonize as hamiltonize,
)

