"""benchmarks/accelerator.py's readers: the profiler trace parser and the
optimized-HLO counts (issue 57, item 2).

On a CPU the trace holds no device kernels, so the parser is checked on
events with known answers (a device trace's stream kernels, a host trace's
XLA ops, neither) and on a real CPU trace of a small jitted function, whose
host XLA op events it must find; the HLO counts on a small module written
out by hand and on a compiled function with a known transpose.
"""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def accelerator():
    spec = importlib.util.spec_from_file_location(
        "accelerator_benchmark", os.path.join(ROOT, "benchmarks", "accelerator.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(name, ts, dur, process="/device:GPU:0", thread="Stream #13(Compute)", hlo_op=""):
    return {"name": name, "ts": ts, "dur": dur, "process": process, "thread": thread,
            "hlo_op": hlo_op}


def test_kernel_classes(accelerator):
    kernel_class = accelerator.kernel_class
    assert kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert kernel_class("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_TNT") == "matmul"
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert kernel_class("loop_multiply_fusion_3") == "elementwise"
    assert kernel_class("input_reduce_fusion_12") == "reduction"
    assert kernel_class("stream_executor::cuda::Run<16, float, unsigned int>") == "reduction"
    assert kernel_class("loop_transpose_fusion") == "copies"
    assert kernel_class("copy_17") == "copies"
    assert kernel_class("command_buffer", hlo_op="") == "other"
    assert kernel_class("thunk", hlo_op="dot.4") == "matmul"


def test_device_trace_by_hand(accelerator):
    # Two steps on one stream: gemm 0-40, fusion 50-60, reduce 60-70 | gemm 200-240, copy 240-250.
    events = [
        _event("sm90_xmma_gemm", 0, 40), _event("loop_add_fusion", 50, 10),
        _event("input_reduce_fusion", 60, 10), _event("sm90_xmma_gemm", 200, 40),
        _event("copy_3", 240, 10),
        # the same kernels again on the XLA Ops line: not counted twice
        _event("sm90_xmma_gemm", 0, 40, thread="XLA Ops"),
        # host events: not kernels where a device exists
        _event("PjitFunction(step)", 0, 300, process="/host:CPU", thread="python", hlo_op="x"),
    ]
    kernels, source = accelerator.select_kernels(events)
    assert source == "device streams" and len(kernels) == 5
    profile = accelerator.kernel_profile(kernels, 2, "step", source)
    assert profile["kernel_us"] == 110
    assert profile["classes_pct"]["matmul"] == pytest.approx(100 * 80 / 110)
    assert profile["classes_pct"]["elementwise"] == pytest.approx(100 * 10 / 110)
    assert profile["classes_pct"]["reduction"] == pytest.approx(100 * 10 / 110)
    assert profile["classes_pct"]["copies"] == pytest.approx(100 * 10 / 110)
    assert sum(profile["classes_pct"].values()) == pytest.approx(100)
    assert profile["kernels_per_unit"] == 2.5
    assert profile["wall_us"] == 250 and profile["busy_pct"] == pytest.approx(100 * 110 / 250)
    assert profile["gaps_over_10us"] == 1 and profile["gaps_over_100us"] == 1  # gaps 10, 130
    assert profile["largest_gaps_us"] == [130, 10]
    assert profile["top"][0]["name"] == "sm90_xmma_gemm"
    assert profile["top"][0]["ms_per_unit"] == pytest.approx(0.040)
    assert profile["top"][0]["calls_per_unit"] == 1


def test_overlapping_streams_count_busy_time_once(accelerator):
    kernels = [_event("a_gemm", 0, 100), _event("b_fusion", 50, 100, thread="Stream #14")]
    profile = accelerator.kernel_profile(kernels, 1, "step", "device streams")
    assert profile["wall_us"] == 150 and profile["busy_pct"] == pytest.approx(100)


def test_host_ops_stand_in_without_a_device_and_no_events_is_no_error(accelerator):
    host = [_event("dot.3", 0, 30, "/host:CPU", "tf_XLAEigen", hlo_op="dot.3"),
            _event("end: dot.3", 30, 1, "/host:CPU", "tf_XLAEigen"),
            _event("ThunkExecutor::Execute", 0, 40, "/host:CPU", "x", hlo_op="")]
    kernels, source = accelerator.select_kernels(host)
    assert source.startswith("host XLA ops") and [k["name"] for k in kernels] == ["dot.3"]
    # A `while` thunk spans its body's thunks: only the leaves count.
    nested = [_event("while.2", 0, 100, "/host:CPU", "t1", hlo_op="while.2"),
              _event("dot.3", 10, 30, "/host:CPU", "t1", hlo_op="dot.3"),
              _event("add.4", 50, 20, "/host:CPU", "t1", hlo_op="add.4"),
              _event("copy.5", 20, 50, "/host:CPU", "t2", hlo_op="copy.5")]
    kernels, _ = accelerator.select_kernels(nested)
    assert [k["name"] for k in kernels] == ["dot.3", "copy.5", "add.4"]
    kernels, source = accelerator.select_kernels([])
    assert (kernels, source) == ([], "none")
    profile = accelerator.kernel_profile([], 5, "step", source)
    assert profile["kernels"] == 0 and "no kernel" in profile["note"]
    assert "no kernel" in accelerator.profile_summary(profile)


def test_a_real_cpu_trace_is_parsed(accelerator):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    function = jax.jit(lambda a, b: jnp.tanh(a @ b.T).sum(0))
    a = jnp.ones((128, 64))
    function(a, a).block_until_ready()

    def three():
        for _ in range(3):
            function(a, a).block_until_ready()

    profile = accelerator.profile_call(three, 3, "call")
    assert profile["trace_events"] > 0
    if jax.devices()[0].platform == "cpu":
        assert profile["source"].startswith("host XLA ops")
    assert profile["kernels"] >= 3  # at least one XLA op per call
    assert sum(profile["classes_pct"].values()) == pytest.approx(100)
    assert 0 < profile["busy_pct"] <= 100 + 1e-6


HLO = """HloModule jit_step, entry_computation_layout={(f32[4,8]{1,0})->f32[8,4]{1,0}}

%fused_computation (param_0: f32[4,8]) -> f32[8,4] {
  %param_0 = f32[4,8]{1,0} parameter(0)
  %transpose.1 = f32[8,4]{0,1} transpose(f32[4,8]{1,0} %param_0), dimensions={1,0}
  ROOT %exponential.1 = f32[8,4]{1,0} exponential(f32[8,4]{0,1} %transpose.1)
}

ENTRY %main (Arg_0.1: f32[4,8]) -> f32[8,4] {
  %Arg_0.1 = f32[4,8]{1,0} parameter(0)
  %copy.2 = f32[4,8]{0,1} copy(f32[4,8]{1,0} %Arg_0.1)
  %transpose.3 = f32[8,4]{1,0} transpose(f32[4,8]{0,1} %copy.2), dimensions={1,0}
  %custom-call.4 = bf16[8,4]{1,0} custom-call(f32[8,4]{1,0} %transpose.3), custom_call_target="x"
  ROOT %fusion.5 = f32[8,4]{1,0} fusion(f32[4,8]{1,0} %Arg_0.1), kind=kLoop, calls=%fused_computation
}
"""


def test_hlo_counts_by_hand(accelerator):
    counts = accelerator.hlo_counts(HLO, logits_elements=32)
    assert counts["transposes"] == 2 and counts["top_level_transposes"] == 1
    assert counts["copies"] == 1 and counts["top_level_copies"] == 1
    assert counts["fusions"] == 1 and counts["custom_calls"] == 1
    assert counts["top_level_kernels"] == 4  # copy, transpose, custom-call, fusion
    # f32 buffers of the top level only: parameter, copy, transpose, fusion (4·8 each)
    assert counts["f32_logits_size_arrays"] == 4
    assert {a["opcode"] for a in counts["largest_f32"]} == {"parameter", "copy", "transpose",
                                                             "fusion"}


def test_hlo_counts_of_a_compiled_function(accelerator):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    text = jax.jit(lambda a: jnp.transpose(a) @ a).lower(jnp.ones((64, 32))).compile().as_text()
    counts = accelerator.hlo_counts(text, logits_elements=32 * 32)
    assert counts["instructions"] > 0
    assert counts["f32_logits_size_arrays"] >= 1  # the [32, 32] product is a buffer
    assert any(a["shape"] == "f32[32,32]" for a in counts["largest_f32"])


def test_dropout_variants_keep_the_expected_fraction_and_scale(accelerator):
    # The `dropout` task's variants against the definition of dropout: about
    # keep = 1 - rate of the entries survive, each scaled by ~1/keep, the
    # rest are 0; Keras' variant is jax.random.bernoulli of the raw key
    # (what keras/src/backend/jax/random.py draws); a different seed draws
    # a different mask. 65,536 entries: the kept fraction's standard error
    # is 0.0018, the tolerance 0.008 (a wrong threshold is far off).
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import keras
    import numpy as np

    rate, keep = 0.3, 0.7
    x = jnp.asarray(np.random.default_rng(0).uniform(0.5, 1.5, (2, 4, 64, 128)), jnp.float32)
    seed = jnp.array([1234, 0], jnp.uint32)
    variants = dict(accelerator.dropout_variants(rate))
    packed = "keras_hsum packed (threefry, 16-bit fields)"
    assert list(variants) == ["keras (threefry)", packed, "rbg, uint32 bits",
                              "rbg, uint16 bits", "no dropout"]
    if keras.backend.backend() != "jax":  # keras.random.dropout wants the JAX backend
        del variants["keras (threefry)"], variants[packed]
    else:
        mask = jax.random.bernoulli(seed, keep, x.shape)
        np.testing.assert_allclose(jax.jit(variants["keras (threefry)"])(x, seed),
                                   np.where(mask, x / keep, 0), rtol=1e-6)
    for name, dropout in variants.items():
        out = np.asarray(jax.jit(dropout)(x, seed))
        kept = out != 0
        if name == "no dropout":
            np.testing.assert_array_equal(out, x)
            continue
        assert abs(kept.mean() - keep) <= 0.008, name
        np.testing.assert_allclose(out[kept] / np.asarray(x)[kept], 1 / keep, rtol=1e-4)
        other = np.asarray(jax.jit(dropout)(x, seed + 1)) != 0
        assert (other != kept).mean() > 0.3, name  # independent masks differ in ~42%


def test_decode_table_has_the_static_columns_only_when_measured(accelerator):
    row = {"task": "decode:pht", "model": "PHT 30×100", "batch": 1, "ours_s": 0.079,
           "keras-hub BeamSampler_s": 0.074, "floor_s": 0.043, "ours_over_floor": 0.079 / 0.043,
           "keras_hub_over_ours": 0.074 / 0.079}
    plain = accelerator.decode_lines([row])
    assert plain[0] == ("| model | batch | ours s | keras-hub s | floor s | ours ÷ floor | "
                        "keras-hub ÷ ours | errors |")
    assert plain[2] == "| PHT 30×100 | 1 | 0.079 | 0.074 | 0.043 | 1.84× | 0.94× |  |"
    static = dict(row, task="decode:pht:static", **{"ours, static_s": 0.060,
                  "static_over_ours": 0.060 / 0.079, "static_equal": False})
    lines = accelerator.decode_lines([static, row])
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[3] == "ours, static s" and "static ids = ours" in header
    assert all(line.count("|") == lines[0].count("|") for line in lines[1:3])
    cells = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert cells["ours, static s"] == "0.060" and cells["static ÷ ours"] == "0.76×"
    assert cells["static ids = ours"] == "False"
    cells = dict(zip(header, (c.strip() for c in lines[3].strip("|").split("|"))))
    assert cells["ours, static s"] == "—" and cells["static ids = ours"] == "—"


def test_decode_static_task_costs_and_methods(accelerator):
    assert accelerator.task_cost("decode:pht:static", False) == accelerator.EXPECTED_S[
        "decode:static"] > accelerator.EXPECTED_S["decode"]
    assert accelerator.task_cost("decode:pht", False) == accelerator.EXPECTED_S["decode"]
    assert accelerator.task_cost("dropout", True) == accelerator.SMOKE_EXPECTED_S["dropout"]
    assert [m for m, _ in accelerator.decode_methods("static")] == [
        "ours", "ours, static", "keras-hub BeamSampler", "floor"]
    with pytest.raises(ValueError, match="decode:MODEL:static"):
        accelerator.decode_methods("dynamic")
