"""The block loop of the ``Scan`` and ``Entries`` kernels: a member program's pieces batched over
a block of members (the member axis last), the blocks one after the other (``lax.map``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ._entrywise import members_last

__all__ = ["run_blocks"]


def _batched(fn, batched: bool, vmap: bool):
    """``fn(dyn_m, x)`` of one member as a function of a block with the member axis last: under
    ``vmap``, or entry by entry (:func:`members_last`)."""
    if vmap:
        return jax.vmap(fn, in_axes=(-1 if batched else None, -1), out_axes=-1)
    return members_last(fn, (batched, True))


def run_blocks(member, dyn, y0s, batched: bool, block: int, vmap: bool):
    """Members ``y0s`` (B, d), B a multiple of ``block``: ``(final y, observables, result codes,
    statistics)``, each with the members on the first axis. ``vmap``: the pieces under ``vmap``
    and the time loop (``lax.scan``) outside it, so that the carry keeps the member axis last;
    else each piece entry by entry."""
    B, d = y0s.shape
    n_save = member.n_steps // member.save_every
    init, observe, summary = (_batched(f, batched, vmap) for f in (member.init, member.observe, member.summary))
    if vmap:
        advance = functools.partial(member.advance, step=_batched(member.step, batched, vmap))
    else:
        advance = _batched(member.advance, batched, vmap)

    def run_block(dyn_b, y_b):
        dyn_b = jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), dyn_b) if batched else dyn_b
        carry = init(dyn_b, y_b.T)

        def one_save(c, _):
            c = advance(dyn_b, c)
            return c, observe(dyn_b, c)

        first = observe(dyn_b, carry)
        carry, saved = jax.lax.scan(one_save, carry, None, length=n_save)
        saved = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, saved)
        return summary(dyn_b, carry), saved

    nb = B // block
    y_blocks = y0s.reshape(nb, block, d)
    if batched:
        out = jax.lax.map(lambda a: run_block(*a), (jax.tree.map(lambda a: a.reshape(nb, block, *a.shape[1:]), dyn), y_blocks))
    else:
        out = jax.lax.map(lambda y: run_block(dyn, y), y_blocks)
    # (nb, ..., block) -> (nb * block, ...)
    (y_final, result, stats), saved = jax.tree.map(lambda a: jnp.moveaxis(a, -1, 1).reshape(B, *a.shape[1:-1]), out)
    return y_final, saved, result, stats
