"""benchmarks/gpu_compile.py's reading of an optimized GPU program.

The module below is written by hand in the form XLA's GPU compiler prints
(fusions, a cuBLAS call with its workspace, a loop of known trip count
updating a buffer in place); each expected figure is worked out here from
the shapes, independently of the code under test.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import gpu_compile  # noqa: E402

MODULE = r"""HloModule jit_step, is_scheduled=true

%fused_add (param_0: f32[1000,1000], param_1: f32[1000,1000]) -> f32[1000,1000] {
  %param_0 = f32[1000,1000]{1,0} parameter(0)
  %param_1 = f32[1000,1000]{1,0} parameter(1)
  %exponential.1 = f32[1000,1000]{1,0} exponential(%param_1), metadata={op_name="jit(step)/jvp(encoder_layer_2)/softmax/exp"}
  ROOT %add.1 = f32[1000,1000]{1,0} add(%param_0, %exponential.1), metadata={op_name="jit(step)/jvp(encoder_layer_2)/softmax/add"}
}

%fused_slice (param_0.1: bf16[64,4096]) -> bf16[8,4096] {
  %param_0.1 = bf16[64,4096]{1,0} parameter(0)
  ROOT %slice.1 = bf16[8,4096]{1,0} slice(%param_0.1), slice={[0:8], [0:4096]}
}

%region_sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_reduce (param_0.3: bf16[512,1024]) -> f32[512] {
  %param_0.3 = bf16[512,1024]{1,0} parameter(0)
  %convert.3 = f32[512,1024]{1,0} convert(%param_0.3)
  %constant.3 = f32[] constant(0)
  ROOT %reduce.3 = f32[512]{0} reduce(%convert.3, %constant.3), dimensions={1}, to_apply=%region_sum, metadata={op_name="jit(step)/transpose(jvp(decoder_layer_0))/dense/reduce_sum"}
}

%fused_dus (param_0.2: f32[200,16,256], param_1.2: f32[16,256], param_2.2: s32[]) -> f32[200,16,256] {
  %param_1.2 = f32[16,256]{1,0} parameter(1)
  %bitcast.2 = f32[1,16,256]{2,1,0} bitcast(%param_1.2)
  %param_0.2 = f32[200,16,256]{2,1,0} parameter(0)
  %param_2.2 = s32[] parameter(2)
  %constant.2 = s32[] constant(0)
  ROOT %dynamic-update-slice.2 = f32[200,16,256]{2,1,0} dynamic-update-slice(%param_0.2, %bitcast.2, %param_2.2, %constant.2, %constant.2)
}

%body (state: (s32[], f32[200,16,256], f32[16,256])) -> (s32[], f32[200,16,256], f32[16,256]) {
  %state = (s32[], f32[200,16,256]{2,1,0}, f32[16,256]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %buffer = f32[200,16,256]{2,1,0} get-tuple-element(%state), index=1
  %row = f32[16,256]{1,0} get-tuple-element(%state), index=2
  %fusion.2 = f32[200,16,256]{2,1,0} fusion(%buffer, %row, %i), kind=kLoop, calls=%fused_dus
  ROOT %out = (s32[], f32[200,16,256]{2,1,0}, f32[16,256]{1,0}) tuple(%i, %fusion.2, %row)
}

%cond (state.1: (s32[], f32[200,16,256], f32[16,256])) -> pred[] {
  %state.1 = (s32[], f32[200,16,256]{2,1,0}, f32[16,256]{1,0}) parameter(0)
  ROOT %p = pred[] constant(true)
}

ENTRY %main (p0: f32[1000,1000], p1: f32[1000,1000], p2: bf16[64,4096], p3: bf16[512,256], p4: bf16[256,1024], p5: (s32[], f32[200,16,256], f32[16,256])) -> f32[1000,1000] {
  %p0 = f32[1000,1000]{1,0} parameter(0)
  %p1 = f32[1000,1000]{1,0} parameter(1)
  %p2 = bf16[64,4096]{1,0} parameter(2)
  %p3 = bf16[512,256]{1,0} parameter(3)
  %p4 = bf16[256,1024]{1,0} parameter(4)
  %p5 = (s32[], f32[200,16,256]{2,1,0}, f32[16,256]{1,0}) parameter(5)
  %fusion = f32[1000,1000]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%fused_add
  %fusion.1 = bf16[8,4096]{1,0} fusion(%p2), kind=kLoop, calls=%fused_slice
  %gemm = (bf16[512,1024]{1,0}, s8[33554432]{0}) custom-call(%p3, %p4), custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(step)/jvp(decoder_layer_0)/dense/dot_general"}, backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %gemm.0 = bf16[512,1024]{1,0} get-tuple-element(%gemm), index=0
  %fusion.3 = f32[512]{0} fusion(%gemm.0), kind=kInput, calls=%fused_reduce
  %copy.1 = bf16[1024,512]{0,1} copy(%gemm.0)
  %loop = (s32[], f32[200,16,256]{2,1,0}, f32[16,256]{1,0}) while(%p5), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"200"}}
  ROOT %result = f32[1000,1000]{1,0} bitcast(%fusion)
}
"""


@pytest.fixture(scope="module")
def found():
    return {k["name"]: k for k in gpu_compile.kernels(MODULE)}


def test_kernels_are_the_launching_instructions(found):
    # parameters, get-tuple-element, tuple, bitcast and the while itself are
    # no kernels; the loop body's fusion is one, run 200 times
    assert set(found) == {"fusion", "fusion.1", "gemm", "fusion.3", "copy.1", "fusion.2"}
    assert found["fusion.2"]["calls"] == 200
    assert all(found[name]["calls"] == 1 for name in found if name != "fusion.2")


def test_bytes_read_and_written(found):
    assert found["fusion"]["bytes"] == 3 * 1000 * 1000 * 4
    assert found["fusion.1"]["bytes"] == 2 * 8 * 4096 * 2  # the slice, not the 64 rows
    # cuBLAS: both operands and the product; the 32 MiB workspace is not counted
    assert found["gemm"]["bytes"] == (512 * 256 + 256 * 1024 + 512 * 1024) * 2
    assert found["fusion.3"]["bytes"] == 512 * 1024 * 2 + 512 * 4
    assert found["copy.1"]["bytes"] == 2 * 512 * 1024 * 2
    # in place: the row read and written, the index read; not the buffer
    assert found["fusion.2"]["bytes"] == 2 * 16 * 256 * 4 + 4


def test_classes_flops_and_elementwise_work(found):
    assert {name: k["class"] for name, k in found.items()} == {
        "fusion": "elementwise", "fusion.1": "copies", "gemm": "matmul",
        "fusion.3": "reduction", "copy.1": "copies", "fusion.2": "copies"}
    assert found["gemm"]["flops"] == 2 * 512 * 1024 * 256
    assert found["fusion"]["flops"] == 0
    # exp (4 per element, gpu_compile._ALU_COST) + add (1)
    assert found["fusion"]["alu_ops"] == 5 * 1000 * 1000
    # convert (1 per element) + the reduction's adds (one per input element)
    assert found["fusion.3"]["alu_ops"] == 2 * 512 * 1024


def test_roofline_and_summary(found):
    spec = gpu_compile.TARGETS["h100"]
    gemm = found["gemm"]
    expected = max(gemm["bytes"] / spec["memory_bandwidth"], gemm["flops"] / spec["bf16_peak"])
    assert gpu_compile.roofline_s(gemm, "h100") == pytest.approx(expected)
    total = gpu_compile.summary(list(found.values()), "h100", top=3)
    assert total["total"]["kernels"] == 5 + 200
    assert total["total"]["gb"] == pytest.approx(
        sum(k["bytes"] * k["calls"] for k in found.values()) / 1e9)
    assert total["by_class"]["matmul"]["kernels"] == 1
    assert [k["roofline_ms"] for k in total["top"]] == sorted(
        (k["roofline_ms"] for k in total["top"]), reverse=True)
    assert gpu_compile.layer_of(found["fusion"]["op"]) == "encoder_layer_N/softmax"
    assert gpu_compile.layer_of(found["fusion.3"]["op"]) == "decoder_layer_N/dense"


TRITON_MODULE = r"""HloModule jit_attention, is_scheduled=true

ENTRY %main (q: bf16[2,128,2,64], k: bf16[2,96,2,64], v: bf16[2,96,2,64], keys: u32[2,2,128]) -> bf16[2,128,2,64] {
  %q = bf16[2,128,2,64]{3,2,1,0} parameter(0)
  %k = bf16[2,96,2,64]{3,2,1,0} parameter(1)
  %v = bf16[2,96,2,64]{3,2,1,0} parameter(2)
  %keys = u32[2,2,128]{2,1,0} parameter(3)
  %pallas_call.7 = (bf16[2,128,2,64]{3,2,1,0}, f32[2,2,128]{2,1,0}) custom-call(%q, %k, %v, %keys), custom_call_target="__gpu$xla.gpu.triton", operand_layout_constraints={bf16[2,128,2,64]{3,2,1,0}, bf16[2,96,2,64]{3,2,1,0}, bf16[2,96,2,64]{3,2,1,0}, u32[2,2,128]{2,1,0}}, api_version=API_VERSION_TYPED_FFI, metadata={op_name="jit(step)/jvp(encoder_layer_0)/dropout_attention_forward/pallas_call"}, backend_config={ir = "\00\01opaque", name = "dropout_attention_forward", num_stages = 2 : i32, num_warps = 8 : i32}
  ROOT %out = bf16[2,128,2,64]{3,2,1,0} get-tuple-element(%pallas_call.7), index=0
}
"""


def test_a_pallas_kernel_takes_the_work_of_its_signature():
    """A Triton custom call is opaque in the HLO: its bytes are its operands
    and outputs; its FLOPs and elementwise operations are those given for
    its `pallas_signature` (name and operands' dtypes and shapes)."""
    signature = gpu_compile.pallas_signature(
        "dropout_attention_forward",
        ["bf16[2,128,2,64]", "bf16[2,96,2,64]", "bf16[2,96,2,64]", "u32[2,2,128]"])
    operands = 2 * (2 * 128 * 2 * 64) + 2 * 2 * (2 * 96 * 2 * 64) + 4 * (2 * 2 * 128)
    outputs = 2 * (2 * 128 * 2 * 64) + 4 * (2 * 2 * 128)
    for pallas, flops, alu in ((None, 0, 0), ({signature: [5e9, 7e8]}, 5e9, 7e8),
                               ({signature.replace("96", "97"): [5e9, 7e8]}, 0, 0)):
        (kernel,) = gpu_compile.kernels(TRITON_MODULE, pallas=pallas)
        assert kernel["kind"] == "__gpu$xla.gpu.triton" and kernel["class"] == "attention"
        assert kernel["bytes"] == operands + outputs
        assert (kernel["flops"], kernel["alu_ops"]) == (flops, alu)


def test_pallas_work_counts_flash_attention_dots():
    """The dots of the kernels (each 2·B·N·T·S·Dh FLOPs when the blocks
    divide the lengths): 2 in the forward kernel (QKᵀ, PV), 4 in the dK/dV
    kernel (QKᵀ again, dV, dP, dK), 3 in the dQ kernel (QKᵀ, dP, dQ),
    counted from the kernels' jaxprs (each body times its grid and loop
    trips)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from keras_hsum.layers import dropout_attention

    b, t, n, h = 1, 128, 2, 32
    q = jnp.ones((b, t, n, h), jnp.float32)

    def loss(q, k, v):
        return dropout_attention.flash_dropout_attention(
            q, k, v, None, 0.1, 3, interpret=True).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, q, q)
    work = gpu_compile.pallas_work(jaxpr.jaxpr)
    dot = 2 * b * n * t * t * h
    by_name = {signature.split("(")[0]: value for signature, value in work.items()}
    assert sorted(by_name) == ["dropout_attention_backward_dkdv",
                               "dropout_attention_backward_dq", "dropout_attention_forward"]
    assert by_name["dropout_attention_forward"][0] == 2 * dot
    assert by_name["dropout_attention_backward_dkdv"][0] == 4 * dot
    assert by_name["dropout_attention_backward_dq"][0] == 3 * dot
    # Every weight is hashed (integer work) in each kernel.
    assert all(ops >= b * n * t * t for _, ops in work.values())
