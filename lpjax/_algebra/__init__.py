from ._base import LieAlgebra as LieAlgebra
from ._split import GroupSplit as GroupSplit, group_split as group_split
from ._constructors import (
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
from ._rotation import RotationFrame as RotationFrame, rotation_frame as rotation_frame
