"""Clebsch canonization: momentum maps, canonized systems, 𝔥, invariants J, lifting (seed 002)."""

from ._clebsch import (
    CollectiveHamiltonian as CollectiveHamiltonian,
    canonize as canonize,
    in_symmetry_algebra as in_symmetry_algebra,
    invariants as invariants,
    lift as lift,
    momentum_map as momentum_map,
    symmetry_algebra as symmetry_algebra,
)
