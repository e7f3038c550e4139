"""Lie groups as Equinox modules (public namespace).

* :class:`SO3` — rotations of R³, closed-form exp/log/Cayley on so(3) ≅ (R³, ×).
* :class:`SOn` — rotations of Rⁿ on upper-triangle so(n) coordinates.
* :class:`SE3` — rigid motions on se(3) coordinates ``(ω, v)``.

All share :class:`AbstractMatrixLieGroup`: ``identity``, ``exp``, ``cayley``, ``from_matrix``,
``compose`` (also ``g @ h``), ``inverse``, ``act`` (also ``g @ points``), ``log``,
``inverse_cayley``, ``Ad``, ``Ad_star`` (``:= Adᵀ``, so ``<Ad*_g μ, ξ> = <μ, Ad_g ξ>``) and
``as_matrix``. ``cayley(x) = (I - hat x)^{-1}(I + hat x)`` (no factor ½).
"""

from ._group import (
    SE3 as SE3,
    SO3 as SO3,
    AbstractMatrixLieGroup as AbstractMatrixLieGroup,
    SOn as SOn,
)
