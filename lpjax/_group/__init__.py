from ._base import AbstractMatrixLieGroup as AbstractMatrixLieGroup
from ._se3 import SE3 as SE3
from ._so3 import SO3 as SO3
from ._son import SOn as SOn
