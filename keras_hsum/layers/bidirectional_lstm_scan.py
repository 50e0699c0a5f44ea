"""Keras' masked `Bidirectional(LSTM)` with both directions in one scan."""

import keras
from keras import ops


def bidirectional_lstm_scan(bidirectional, inputs, mask, backward_inputs=None,
                            backward_mask=None, right_padded=False):
    """What `bidirectional(inputs, mask=mask)` gives, in one loop.

    Keras runs the two LSTMs of a `Bidirectional` one after the other, each
    in its own loop whose every step multiplies its input by the kernel:
    2·T steps of two matmuls each (and twice that backward). Here the input
    projections x_t W + b of all steps and both directions are computed
    before the loop, as one matmul per direction, and one loop of T steps
    advances both directions at once, stacked on a leading axis
    (direction 0 reads t = 0..T-1, direction 1 reads t = T-1..0); each step
    does one batched h_(t-1) U and the gates. The weights are the layers'
    own (`cell.kernel`, `cell.recurrent_kernel`, `cell.bias`): nothing is
    created, so saved models and checkpoints load as before.

    The math is Keras' LSTM (`implementation=2`, the default), with Keras'
    masking: z = x_t W + h_(t-1) U + b split into i, f, g, o;
    c_t = σ(f) c_(t-1) + σ(i) tanh(g); h_t = σ(o) tanh(c_t) (with the
    cell's activations). A masked step keeps (h, c) and outputs zeros
    (`Bidirectional` sets `zero_output_for_mask` when it returns
    sequences), so the backward direction starts at the last unmasked
    step. Equal to the two Keras loops up to float rounding (the input
    products are summed in another order).

    Args:
        bidirectional: a `keras.layers.Bidirectional` of two `LSTM`s with
            `merge_mode=None`, no dropout, not stateful, not unrolled (built
            here from `inputs` if it is not built yet).
        inputs: float [B, T, E], what the forward LSTM reads.
        mask: bool [B, T], True for the steps to read.
        backward_inputs: optional float [B, T, E], what the backward LSTM
            reads (from T-1 down to 0); default `inputs`, as
            `Bidirectional` does.
        backward_mask: optional bool [B, T] for `backward_inputs`; default
            `mask`.
        right_padded: whether every row of `mask` is True then False (no
            holes). With a GPU visible, such a call with the default
            backward sequence runs cuDNN's LSTM kernel: under TensorFlow
            through the Keras layer itself (the states are then what the
            layer returns, None when it is not built with
            `return_state=True`); under JAX through
            `jax.experimental.rnn.lstm` (`jax_cudnn_bidirectional`; both
            directions in one call, in float32, unless the layers were
            built with `use_cudnn=False`, a `keras.distribution` spans
            several devices, or JAX's GPU plugin lacks its RNN kernels).
            Both check the mask at run time and take the scan for a row
            with holes.

    Returns:
        `(forward, backward, states)`: the outputs [B, T, D] of each
        direction aligned with its input's time axis (zeros at masked
        steps; `backward[:, t]` is the backward LSTM's output at input step
        t, as `Bidirectional` returns it) and the final states
        `(forward_h, forward_c, backward_h, backward_c)`, each [B, D], all
        in the layer's compute dtype.

    Example:
    >>> encoder = keras.layers.Bidirectional(
    ...     keras.layers.LSTM(4, return_sequences=True), merge_mode=None)
    >>> forward, backward, states = bidirectional_lstm_scan(
    ...     encoder, np.ones((2, 5, 3), "float32"), np.ones((2, 5), "bool"))
    >>> tuple(forward.shape), tuple(backward.shape), len(states)
    ((2, 5, 4), (2, 5, 4), 4)
    """
    _check_layer(bidirectional)
    if len(inputs.shape) != 3 or len(mask.shape) != 2:
        raise ValueError(
            "bidirectional_lstm_scan: expected `inputs` float [B,T,E] and "
            f"`mask` bool [B,T], received shapes {tuple(inputs.shape)} and "
            f"{tuple(mask.shape)}. Reshape the sequences to rank 3 first."
        )
    if not bidirectional.built:
        bidirectional.build(inputs.shape)
    if right_padded and backward_inputs is None and backward_mask is None:
        if _keras_takes_cudnn():
            outputs = bidirectional(inputs, mask=ops.cast(mask, "bool"))
            states = tuple(outputs[2:]) if len(outputs) > 2 else None
            return outputs[0], outputs[1], states
        if _jax_takes_cudnn(bidirectional):
            from jax.experimental import rnn

            return jax_cudnn_bidirectional(bidirectional, inputs, mask, rnn.lstm)
    dtype = bidirectional.compute_dtype
    backward_inputs = inputs if backward_inputs is None else backward_inputs
    backward_mask = mask if backward_mask is None else backward_mask
    cells = (bidirectional.forward_layer.cell, bidirectional.backward_layer.cell)
    units = cells[0].units

    def projected(x, cell):  # [B,T,E] -> [T,B,4D]: x_t W for every step
        z = ops.matmul(ops.cast(x, dtype), ops.cast(cell.kernel, dtype))
        return ops.transpose(z, (1, 0, 2))

    # Direction 1 reads its sequence backwards: reverse it once here so that
    # scan step t reads slot t of both.
    step_inputs = ops.stack(
        [projected(inputs, cells[0]), ops.flip(projected(backward_inputs, cells[1]), axis=0)],
        axis=1,
    )  # [T,2,B,4D]
    step_masks = ops.stack(
        [ops.cast(mask, "bool"), ops.flip(ops.cast(backward_mask, "bool"), axis=1)], axis=0
    )  # [2,B,T]
    # Broadcast here, not in the loop: JAX would save the broadcast mask of
    # every step for the gradient.
    step_masks = ops.broadcast_to(
        ops.transpose(step_masks, (2, 0, 1))[..., None],
        tuple(ops.shape(step_inputs)[:3]) + (units,),
    )  # [T,2,B,D]
    recurrent_kernels = ops.stack(
        [ops.cast(cell.recurrent_kernel, dtype) for cell in cells]
    )  # [2,D,4D]
    biases = ops.stack([ops.cast(cell.bias, dtype) for cell in cells])[:, None, :]  # [2,1,4D]
    outputs, h, c = _masked_lstm_loop(step_inputs, step_masks, recurrent_kernels, biases)
    # outputs [T,2,B,D]: direction 1's in reading order (input step T-1-t).
    forward = ops.transpose(outputs[:, 0], (1, 0, 2))
    backward = ops.flip(ops.transpose(outputs[:, 1], (1, 0, 2)), axis=1)
    return forward, backward, (h[0], c[0], h[1], c[1])


def _masked_lstm_loop(step_inputs, keep, recurrent_kernels, biases):
    """Stacked masked LSTMs from zero state, with a gradient written out.

    Args:
        step_inputs: [T,N,B,4D], x_t W of N stacked LSTMs at each step.
        keep: bool [T,N,B,D], the steps each reads (others keep the state
            and output zeros).
        recurrent_kernels: [N,D,4D], U of each.
        biases: [N,1,4D], b of each.

    Returns:
        `(outputs [T,N,B,D], h [N,B,D], c [N,B,D])`.

    The gradient is the LSTM's, by hand: left to automatic differentiation,
    each step of the loop saves a dozen values (the gates one by one, and
    some twice), each one more kernel per step on a GPU, and accumulates
    dU with a matmul per step. Here the forward loop keeps h, c, σ(z) and
    tanh(g) per step, the backward loop does one matmul dz U^T per step,
    and dU = Σ_t h_(t-1)^T dz_t and db = Σ dz are one reduction each after
    it. Needs sigmoid gates and tanh (checked by the caller).
    """
    units = recurrent_kernels.shape[1]

    def gate_slices(gates):
        return (gates[..., :units], gates[..., units:2 * units], gates[..., 3 * units:])

    # `keep` is an argument, not a value the function closes over: JAX's
    # custom gradient cannot close over values of an enclosing trace (a
    # `lax.cond` branch's, as in `jax_cudnn_bidirectional`).
    @ops.custom_gradient
    def loop(step_inputs, keep, recurrent_kernels, biases):
        zeros = ops.zeros_like(step_inputs[0, ..., :units])  # [N,B,D]

        def step(carry, step_input):
            h, c = carry[:2]
            z, keep_t = step_input
            # Keras' order: x W, + h U, + b.
            z = ops.add(ops.add(z, ops.matmul(h, recurrent_kernels)), biases)
            gates = ops.sigmoid(z)  # g's sigmoid is unused
            g = ops.tanh(z[..., 2 * units:3 * units])
            i, f, o = gate_slices(gates)
            new_c = f * c + i * g
            new_h = o * ops.tanh(new_c)
            output = ops.where(keep_t, new_h, ops.zeros_like(new_h))
            carry = (ops.where(keep_t, new_h, h), ops.where(keep_t, new_c, c), output, gates, g)
            # Keras' TensorFlow `scan` wants per-step outputs shaped as the carry.
            return carry, carry

        initial = (zeros, zeros, zeros, ops.zeros_like(step_inputs[0]), zeros)
        _, (hs, cs, outputs, gates, gs) = ops.scan(step, initial, (step_inputs, keep))

        def gradient(*upstream):
            # JAX passes the outputs' cotangents as one tuple, TensorFlow one by one.
            if len(upstream) == 1:
                upstream = upstream[0]
            d_outputs, d_h, d_c = (
                ops.zeros_like(value) if grad is None else grad
                for grad, value in zip(upstream, (outputs, hs[-1], cs[-1]))
            )
            previous_h = ops.concatenate([zeros[None], hs[:-1]], axis=0)
            previous_c = ops.concatenate([zeros[None], cs[:-1]], axis=0)
            transposed = ops.transpose(recurrent_kernels, (0, 2, 1))

            def backward_step(carry, step_input):
                dh, dc = carry[:2]  # of the state after the step
                d_output, keep_t, gates_t, g, c_before, c_after = step_input
                i, f, o = gate_slices(gates_t)
                # Through the step only where it was read; elsewhere the
                # state passed through unchanged.
                dh_step = ops.where(keep_t, dh + d_output, ops.zeros_like(dh))
                tanh_c = ops.tanh(c_after)  # the step's new c where it was read
                dc_step = ops.where(keep_t, dc, ops.zeros_like(dc)) + dh_step * o * (
                    1.0 - tanh_c * tanh_c
                )
                dz = ops.concatenate(
                    [
                        dc_step * g * i * (1.0 - i),
                        dc_step * c_before * f * (1.0 - f),
                        dc_step * i * (1.0 - g * g),
                        dh_step * tanh_c * o * (1.0 - o),
                    ],
                    axis=-1,
                )
                passed = ops.logical_not(keep_t)
                dh = ops.matmul(dz, transposed) + ops.where(passed, dh, ops.zeros_like(dh))
                dc = dc_step * f + ops.where(passed, dc, ops.zeros_like(dc))
                carry = (dh, dc, dz)
                return carry, carry

            _, (_, _, dzs) = ops.scan(
                backward_step,
                (d_h, d_c, ops.zeros_like(step_inputs[0])),
                (d_outputs, keep, gates, gs, previous_c, cs),
                reverse=True,
            )
            d_kernels = ops.einsum("tnbd,tnbg->ndg", previous_h, dzs)
            d_biases = ops.sum(dzs, axis=(0, 2))[:, None, :]
            return dzs, None, d_kernels, d_biases

        return (outputs, hs[-1], cs[-1]), gradient

    return loop(step_inputs, keep, recurrent_kernels, biases)


def lstm_gates(z, c, cell):
    """Keras' LSTM update from the gate pre-activations.

    Args:
        z: [..., 4D], x W + h U + b (gates i, f, g, o, as `LSTMCell`).
        c: [..., D], the previous carry.
        cell: the `keras.layers.LSTMCell` whose activations to use.

    Returns:
        `(h, c)`, each [..., D]: c = σ(f) c + σ(i) tanh(g), h = σ(o) tanh(c).
    """
    units = cell.units
    # One activation over all four gates (g's sigmoid is unused): one value
    # saved for the gradient instead of three.
    gates = cell.recurrent_activation(z)
    i, f, o = gates[..., :units], gates[..., units:2 * units], gates[..., 3 * units:]
    c = f * c + i * cell.activation(z[..., 2 * units:3 * units])
    return o * cell.activation(c), c


def _keras_takes_cudnn():
    """Whether Keras' LSTM layer would run cuDNN's kernel here: the
    TensorFlow backend with a GPU (Keras' JAX and torch LSTMs refuse masks
    on that path, so the scan is theirs)."""
    return keras.backend.backend() == "tensorflow" and bool(
        keras.distribution.list_devices("gpu")
    )


def _jax_takes_cudnn(bidirectional):
    """Whether `jax_cudnn_bidirectional` runs here: the JAX backend on a GPU
    whose plugin has the cuDNN RNN kernels, no `keras.distribution` over
    more than one device, and neither direction built with
    `use_cudnn=False`. (XLA cannot split cuDNN's custom call across
    devices: under a sharded batch every device would gather the whole
    batch and run all of it, so a distributed step keeps the scan.)"""
    if keras.backend.backend() != "jax":
        return False
    layers = (bidirectional.forward_layer, bidirectional.backward_layer)
    if any(getattr(layer, "use_cudnn", "auto") is False for layer in layers):
        return False
    distribution = keras.distribution.distribution()
    if distribution is not None and distribution.device_mesh.devices.size > 1:
        return False
    import jax

    return jax.default_backend() == "gpu" and _cudnn_rnn_available()


def _cudnn_rnn_available():
    """Whether JAX's GPU plugin brings its cuDNN RNN kernels (jaxlib's
    `gpu_rnn` then has the workspace-size function `jax.experimental.rnn`
    calls while tracing; without the plugin's `_rnn` it does not)."""
    try:
        from jax.experimental import rnn
    except ImportError:
        return False
    return hasattr(getattr(rnn, "gpu_rnn", None), "compute_rnn_workspace_reserve_space_sizes")


def cudnn_lstm_weights(bidirectional):
    """The two LSTMs' weights as cuDNN's one flat float32 vector.

    The layout of `jax.experimental.rnn` for one bidirectional layer with
    double bias: W_ih and W_hh of the forward LSTM, then of the backward
    one, then b_ih and b_hh of each. W_ih is Keras' `kernel` [E, 4D]
    transposed, W_hh its `recurrent_kernel` [D, 4D] transposed, b_ih its
    `bias` and b_hh zeros: Keras' gate order i, f, c, o is cuDNN's i, f,
    g, o. Built from the variables at every call, so gradients reach the
    layers' own weights.

    Args:
        bidirectional: a checked `keras.layers.Bidirectional` of two LSTMs.

    Returns:
        float32 [8·D·(E + D) + 16·D].
    """
    cells = (bidirectional.forward_layer.cell, bidirectional.backward_layer.cell)
    matrices, biases = [], []
    for cell in cells:
        matrices += [
            ops.reshape(ops.transpose(ops.cast(cell.kernel, "float32")), (-1,)),
            ops.reshape(ops.transpose(ops.cast(cell.recurrent_kernel, "float32")), (-1,)),
        ]
        bias = ops.cast(cell.bias, "float32")
        biases += [bias, ops.zeros_like(bias)]
    return ops.concatenate(matrices + biases, axis=0)


def jax_cudnn_bidirectional(bidirectional, inputs, mask, lstm):
    """`bidirectional_lstm_scan` of a right-padded batch by cuDNN (JAX only).

    One call of `lstm` (`jax.experimental.rnn.lstm`, cuDNN's kernel and
    its backward on a GPU) runs both directions over each row's first
    `sum(mask)` steps: the forward LSTM from step 0, the backward one from
    the row's last read step, which is `Bidirectional`'s masked result when
    the mask has no holes. A batch with a row with holes takes the scan
    instead (`jax.lax.cond`, decided at run time, as Keras' TensorFlow LSTM
    checks before its cuDNN kernel). The kernel takes float32 only: the
    inputs and weights go in as float32 (matmuls in TF32 on the GPU) and
    the results come back in the layer's compute dtype. A row with no
    read step runs one step for the kernel (cuDNN wants lengths >= 1)
    whose output and state are then zeroed, as the scan leaves them.

    Args:
        bidirectional: a checked `keras.layers.Bidirectional` of two LSTMs.
        inputs: float [B, T, E].
        mask: bool [B, T].
        lstm: `jax.experimental.rnn.lstm`, or a function of the same
            arguments (`reference_lstm`, which runs on a CPU).

    Returns:
        As `bidirectional_lstm_scan`: `(forward, backward, states)`.
    """
    import jax
    import jax.numpy as jnp

    dtype = bidirectional.compute_dtype
    units = bidirectional.forward_layer.cell.units
    mask = ops.cast(mask, "bool")
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    steps = ops.arange(ops.shape(mask)[1], dtype="int32")
    prefix = ops.all(ops.equal(mask, steps[None, :] < lengths[:, None]))

    def by_cudnn(inputs, mask):
        batch = ops.shape(inputs)[0]
        zeros = jnp.zeros((2, batch, units), "float32")
        y, h, c = lstm(
            ops.cast(inputs, "float32"), zeros, zeros, cudnn_lstm_weights(bidirectional),
            ops.maximum(lengths, 1), input_size=inputs.shape[-1], hidden_size=units,
            num_layers=1, dropout=0.0, bidirectional=True,
        )
        y = ops.cast(ops.where(mask[..., None], y, 0.0), dtype)
        read = (lengths > 0)[None, :, None]
        h = ops.cast(ops.where(read, h, 0.0), dtype)
        c = ops.cast(ops.where(read, c, 0.0), dtype)
        return y[..., :units], y[..., units:], (h[0], c[0], h[1], c[1])

    def by_scan(inputs, mask):
        return bidirectional_lstm_scan(bidirectional, inputs, mask)

    return jax.lax.cond(prefix, by_cudnn, by_scan, inputs, mask)


def reference_lstm(x, h_0, c_0, weights, seq_lengths, *, input_size, hidden_size, num_layers,
                   dropout, bidirectional):
    """`jax.experimental.rnn.lstm`'s arguments run by JAX's reference
    `lstm_ref` (what JAX's tests hold the cuDNN kernel to) on the weights
    unpacked from cuDNN's flat layout: the kernel's stand-in on any device,
    for `jax_cudnn_bidirectional`'s `lstm` (JAX only)."""
    from jax.experimental import rnn

    unpacked = rnn.unpack_lstm_weights(weights, input_size, hidden_size, num_layers,
                                       bidirectional)
    return rnn.lstm_ref(x, h_0, c_0, *unpacked, seq_lengths, input_size, hidden_size,
                        num_layers, dropout, bidirectional)


def _check_layer(bidirectional):
    layers = (
        getattr(bidirectional, "forward_layer", None),
        getattr(bidirectional, "backward_layer", None),
    )
    problems = []
    if not all(isinstance(layer, keras.layers.LSTM) for layer in layers):
        problems.append("forward and backward layers that are keras.layers.LSTM")
    else:
        if getattr(bidirectional, "merge_mode", None) is not None:
            problems.append("merge_mode=None")
        for layer in layers:
            cell = layer.cell
            if cell.dropout or cell.recurrent_dropout:
                problems.append(f"{layer.name}: no dropout or recurrent_dropout")
            if layer.stateful or layer.unroll:
                problems.append(f"{layer.name}: stateful=False and unroll=False")
            if not cell.use_bias:
                problems.append(f"{layer.name}: use_bias=True")
            if cell.activation is not keras.activations.tanh or (
                cell.recurrent_activation is not keras.activations.sigmoid
            ):
                problems.append(f"{layer.name}: activation='tanh', recurrent_activation='sigmoid'")
        if layers[0].go_backwards or not layers[1].go_backwards:
            problems.append("a forward layer and a go_backwards backward layer")
        if layers[0].cell.units != layers[1].cell.units or (
            layers[0].cell.activation is not layers[1].cell.activation
            or layers[0].cell.recurrent_activation is not layers[1].cell.recurrent_activation
        ):
            problems.append("the same units and activations in both directions")
    if problems:
        raise ValueError(
            "bidirectional_lstm_scan: expected a keras.layers.Bidirectional with "
            + "; ".join(problems)
            + f"; received {bidirectional!r}. Call the layer itself for other "
            "configurations."
        )
