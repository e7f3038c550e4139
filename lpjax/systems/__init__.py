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
