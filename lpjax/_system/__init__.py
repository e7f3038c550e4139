from ._base import (
    AbstractLiePoissonSystem as AbstractLiePoissonSystem,
    AbstractSystem as AbstractSystem,
    CanonicalSystem as CanonicalSystem,
    LiePoissonSystem as LiePoissonSystem,
    NamedCasimirs as NamedCasimirs,
)
from ._families import (
    AbstractClebschFlow as AbstractClebschFlow,
    AbstractFamily as AbstractFamily,
    AbstractFreeRigidBody as AbstractFreeRigidBody,
    AbstractLagrangeTop as AbstractLagrangeTop,
    AnySystem as AnySystem,
    ClebschFlowFamily as ClebschFlowFamily,
    FreeRigidBodyFamily as FreeRigidBodyFamily,
    LagrangeTopFamily as LagrangeTopFamily,
    LiePoissonFamily as LiePoissonFamily,
    MatrixGroupFamily as MatrixGroupFamily,
)
from ._declared import guarded as guarded, values_traced as values_traced
from ._nonholonomic import NonholonomicSystem as NonholonomicSystem
from ._hamiltonize import Hamiltonized as Hamiltonized, hamiltonize as hamiltonize
from ._stochastic import StochasticLiePoissonSystem as StochasticLiePoissonSystem
