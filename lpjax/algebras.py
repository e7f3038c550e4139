"""Lie algebras given by structure constants (public namespace)."""

from ._algebra import (
    GroupSplit as GroupSplit,
    LieAlgebra as LieAlgebra,
    group_split as group_split,
    euclidean as euclidean,
    from_matrix_basis as from_matrix_basis,
    se3 as se3,
    se3_x_r3 as se3_x_r3,
    se3_x_r4 as se3_x_r4,
    semidirect as semidirect,
    so as so,
    so3 as so3,
    so21 as so21,
)
