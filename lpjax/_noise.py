"""Counter-based Wiener increments: the same numbers in ``integrate``, in every ensemble kernel,
for any chunking, process count or resume.

A run's key is JAX's (``jax.random.key(seed)``, Threefry-2x32). Member ``j``'s key is
``jax.random.fold_in(key, j)`` (``integrate``: the key itself). Step ``n``'s increments are
``√dt · z`` with ``z`` standard normals made from the Threefry-2x32 block of that key at the
counter ``(n, i)``, ``i`` the index of a pair of normals: its two 32-bit words ``w₀, w₁`` give
``u₁ = (w₀ + ½)/2³²``, ``u₂ = w₁/2³²`` and Box–Muller's ``√(−2 log u₁) (cos 2πu₂, sin 2πu₂)``.

Threefry is written here in 32-bit integer additions, rotations and exclusive ors (Salmon et al.
2011, 20 rounds, as ``jax.random`` runs it; the tests check them equal), so that every kernel
runs it; Box–Muller needs only ``log`` and ``sqrt`` from a library (``jax.random.normal``'s
inverse error function is in no native library), its cosine and sine of ``2πu₂`` being
polynomials here (:func:`_cos_sin_2pi`). The normals are therefore lpjax's own from JAX's bits;
they are not ``jax.random.normal``'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, UInt32

__all__ = ["threefry2x32", "member_key", "increments", "key_words"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _rotl(x, r: int):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0, k1, x0, x1) -> tuple:
    """Threefry-2x32 (20 rounds) of the key ``(k0, k1)`` at the counter ``(x0, x1)``, all uint32."""
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(_PARITY))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def key_words(key) -> UInt32[Array, "2"]:
    """A JAX key (typed, or its raw uint32 data of shape (2,)) as its two words."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if jax.random.key_impl(key) != jax.random.key_impl(jax.random.key(0)) or key.shape != ():
            raise TypeError("key: one Threefry-2x32 key (jax.random.key(seed)) is expected")
        return jax.random.key_data(key)
    raw = jnp.asarray(key)
    if raw.dtype != jnp.uint32 or raw.shape != (2,):
        raise TypeError(f"key must be a JAX key (jax.random.key(seed)) or its data (uint32, shape (2,)), got {raw.dtype} "
                        f"{raw.shape}")
    return raw


def member_key(words: UInt32[Array, "2"], member) -> UInt32[Array, "2"]:
    """``jax.random.fold_in(key, member)``'s words: Threefry of the key at the counter ``(0, member)``."""
    return jnp.stack(threefry2x32(words[0], words[1], jnp.zeros((), jnp.uint32), jnp.asarray(member, jnp.uint32)))


_SIN_TERMS, _COS_TERMS = 8, 9  # Taylor terms of sin and cos on |φ| ≤ π/8: remainders below 4e-22 and 5e-24


def _cos_sin_2pi(u, dtype) -> tuple:
    """``(cos 2πu, sin 2πu)`` for ``u`` in [0, 1), to an ulp or two, in arithmetic and selects
    only (a library's ``sin`` and ``cos`` are calls per member in the native kernel, where these
    vectorize): ``2πu = (k + ½)π/4 + φ``, ``k = ⌊8u⌋``, ``|φ| ≤ π/8``, the angle ``(k + ½)π/4``'s
    cosine and sine selected from their 8 values, ``φ``'s by Taylor polynomials in Horner's form."""
    t = 8 * u  # (exact: u has 32 bits)
    k = jnp.floor(t)
    phi = (t - k - 0.5) * (np.pi / 4)
    p = phi * phi
    s = jnp.ones_like(p)
    for j in range(_SIN_TERMS - 1, 0, -1):  # sin φ = φ (1 − φ²/(2·3) (1 − φ²/(4·5) (…)))
        s = 1 - p / ((2 * j) * (2 * j + 1)) * s
    c = jnp.ones_like(p)
    for j in range(_COS_TERMS - 1, 0, -1):  # cos φ = 1 − φ²/(1·2) (1 − φ²/(3·4) (…))
        c = 1 - p / ((2 * j - 1) * (2 * j)) * c
    s = phi * s
    a = (np.arange(8) + 0.5) * np.pi / 4
    ca, sa = jnp.zeros_like(p), jnp.zeros_like(p)
    for i in range(8):
        ca, sa = jnp.where(k == i, np.cos(a[i]), ca), jnp.where(k == i, np.sin(a[i]), sa)
    return ca * c - sa * s, sa * c + ca * s


def increments(words: UInt32[Array, "2"], n, dt, m: int, dtype) -> Float[Array, " m"]:
    """Step ``n``'s ``m`` Wiener increments ``√dt z`` from a member's key words (see the module)."""
    n = jnp.asarray(n).astype(jnp.uint32)
    z = []
    for i in range((m + 1) // 2):
        w0, w1 = threefry2x32(words[0], words[1], n, jnp.asarray(i, jnp.uint32))
        u1 = (w0.astype(dtype) + 0.5) * (2.0 ** -32)
        u2 = w1.astype(dtype) * (2.0 ** -32)
        rho = jnp.sqrt(-2 * jnp.log(u1))
        cos, sin = _cos_sin_2pi(u2, dtype)
        z += [rho * cos, rho * sin]
    return jnp.sqrt(jnp.asarray(dt, dtype)) * jnp.stack(z[:m])
