"""Scalar values of the native kernel's LLVM IR (:mod:`lpjax._ensemble._kernels._native`): SSA
values (:class:`Sym`), constants as operands (:func:`lit`), and the LLVM types of dtypes."""

from __future__ import annotations

import numpy as np

from .._entrywise import Unfusable

__all__ = ["Sym", "lit", "llvm_type", "is_sym", "dtype_of"]

_TYPES = {np.dtype(k): v for k, v in (("float64", "double"), ("float32", "float"), ("int64", "i64"),
                                      ("int32", "i32"), ("uint32", "i32"), ("int8", "i8"), ("uint8", "i8"),
                                      ("bool", "i1"))}


class Sym:
    """A scalar SSA value of the generated code, and the member loop (``seg``) that defines
    it (None: defined outside every member loop, the same for all members)."""

    __slots__ = ("name", "dtype", "seg")

    def __init__(self, name: str, dtype, seg=None):
        self.name, self.dtype, self.seg = name, np.dtype(dtype), seg

    def __repr__(self):
        return f"Sym({self.name}: {self.dtype})"


def is_sym(x) -> bool:
    return isinstance(x, Sym)


def dtype_of(x) -> np.dtype:
    return x.dtype if is_sym(x) else np.asarray(x).dtype


def llvm_type(dt) -> str:
    """The LLVM type that holds ``dt`` (unsigned integers share their signed type)."""
    dt = np.dtype(dt)
    if dt not in _TYPES:
        raise Unfusable(f"dtype {dt}")
    return _TYPES[dt]


def lit(x, dtype=None) -> str:
    """A value as an operand: an SSA name, or a constant of ``dtype`` (default: its own)."""
    if is_sym(x):
        return x.name
    a = np.asarray(x)
    dt = np.dtype(dtype or a.dtype)
    llvm_type(dt)
    v = a.astype(dt).item()
    if dt == np.bool_:
        return "true" if v else "false"
    if dt.kind == "f":  # the exact bits, as a double (LLVM writes float constants as doubles too)
        return f"0x{np.float64(v).view(np.uint64):016X}"
    return str(int(a.astype(dt).view(dt.str.replace("u", "i")))) if dt.kind == "u" else str(int(v))
