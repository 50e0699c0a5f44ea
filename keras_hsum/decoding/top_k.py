"""`blocked_top_k`: `ops.top_k` over long rows, cut into blocks on a GPU.

The decoding's top-k sites take the best few of long rows: each beam's
candidates over V scores and the finished scores of a beam search
(`keras_hsum.decoding.beam_search`), the k-th most probable token of a
sampling distribution (`keras_hsum.decoding.sampling`). On a GPU such a row
is one thread block, so `blocked_top_k` cuts it into many short rows where a
GPU is visible, and is one `ops.top_k` elsewhere (issue 57). Both modules
import it from here, which imports neither of them.

Tests and benchmarks that trace the search as on a GPU set `TOP_K_BLOCK` and
`_gpu_visible` on this module: `blocked_top_k` reads both from here at every
call. The search calls it through its own module's name
(`keras_hsum.decoding.beam_search.blocked_top_k`), which a test may replace
to record the search's calls.
"""

import keras
import numpy as np
from keras import ops

TOP_K_BLOCK = 512
"""`blocked_top_k`'s block where a GPU is visible: rows longer than two
blocks are cut into blocks of this many elements."""


def _gpu_visible():
    """Whether Keras' default devices are GPUs (`keras.distribution`, either
    backend): the search's top-k rows are then cut into blocks."""
    return any(str(device).lower().startswith("gpu")
               for device in keras.distribution.list_devices())


def blocked_top_k(x, k, block=None):
    """`ops.top_k(x, k)` over the last axis, for rows of many elements.

    A GPU top-k kernel gives each row to one thread block, so a few long rows
    (a decode step's B·K rows of V = 32,000 scores) leave the device nearly
    idle: at paper size it was the slowest kernel of a decode step (issue 57).
    So where a GPU is visible (or a `block` is given) each row of
    N > 2·`block` elements is cut into ⌈N/block⌉ blocks
    (the last one padded with -inf), the best k of every block are found
    (many short rows), then the best k of those candidates. The result is
    `ops.top_k`'s, ties included: every one of a row's best k is among the
    best k of its block, and among equal values `top_k` puts the lower index
    first in every backend, which in the candidates' order (block, then rank
    in the block) is the lower index of the row; a padded element, after
    every real one, loses every tie. On a CPU one top-k is faster (blocks of
    512 took 2.8-3.0× its time on [5·B, 32,000] rows, benchmarks/
    blocked_top_k.py), so there it stays one top-k.

    Args:
        x: float [..., N]; N static where blocking should apply.
        k: a Python int, k <= N.
        block: elements per block (a Python int > 0); None: `TOP_K_BLOCK`
            where a GPU is visible, else one `top_k`.

    Returns:
        `(values [..., k], indices int32 [..., k])`, best first.
    """
    if block is None:
        block = TOP_K_BLOCK if _gpu_visible() else None
    size = x.shape[-1]
    if block is None or size is None or size <= 2 * int(block) or k > int(block):
        values, indices = ops.top_k(x, k)
        return values, ops.cast(indices, "int32")
    size, block = int(size), int(block)
    blocks = -(-size // block)
    leading = tuple(ops.shape(x)[:-1])
    rows = ops.reshape(x, (-1, size))
    if blocks * block > size:
        rows = ops.pad(rows, ((0, 0), (0, blocks * block - size)),
                       constant_values=float("-inf"))
    values, local = ops.top_k(ops.reshape(rows, (-1, blocks, block)), k)  # [R,blocks,k]
    offsets = ops.convert_to_tensor(
        (np.arange(blocks, dtype="int32") * block)[:, None])  # a constant
    indices = ops.reshape(ops.cast(local, "int32") + offsets, (-1, blocks * k))
    values, picked = ops.top_k(ops.reshape(values, (-1, blocks * k)), k)
    indices = ops.take_along_axis(indices, ops.cast(picked, "int32"), axis=1)
    return (ops.reshape(values, leading + (k,)), ops.reshape(indices, leading + (k,)))
