from ._base import (
    AbstractSystem as AbstractSystem,
    CanonicalSystem as CanonicalSystem,
    LiePoissonSystem as LiePoissonSystem,
)
