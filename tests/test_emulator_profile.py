"""The emulator's counters (``--profile``): memory requests, sectors and shared-memory
wavefronts as Nsight Compute defines them (``backends/cuda/counters.py``).

Each expected figure is worked out by hand in a comment beside it, from the lanes'
addresses: a coalesced warp of 4-byte loads touches 4 sectors for 4 ideal ones, a
float at every 32nd word of shared memory puts the whole warp in one bank, and so on.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from backends.base import BackendError
from backends.check import run_and_check
from backends.cuda import CudaBackend
from backends.cuda.emulate import run as run_emulated
from backends.cuda.emulate import run_profiled
from backends.cuda.kernels.probe import c_integer, contiguous_runs
from backends.cuda.render import render
from backends.cuda.sampled import FILLS, check_written, sample
from partitioner import partition
from partitioner.cli import main
from partitioner.cost import window_rows
from partitioner.group import Group
from partitioner.reference import input_values

from .attention_graphs import attention
from .conftest import ROOT, make_graph, op

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
EMULATOR = CudaBackend(emulate=True)

# Two blocks of two warps run this kernel: every site makes one request per warp that
# reaches it (4 in all) unless said otherwise. Each region holds one site (per kind).
PATTERNS_CU = r"""
#include "partition_runtime.cuh"
using namespace nvcuda;

__global__ void patterns(const float* in, float* out) {
  __shared__ float s[33 * 64];
  __shared__ double d[64];
  __shared__ __half h[64];
  __shared__ __align__(32) __half tile[16 * 24];
  __shared__ __align__(32) float acc_tile[16 * 24];
  const int t = threadIdx.x;
  float acc = 0.0f;
  { PART_REGION("coalesced"); acc += PART_LDG(in[t]); PART_STG(out[t]) = acc; }
  { PART_REGION("stride 2"); acc += PART_LDG(in[2 * t]); }
  { PART_REGION("stride 8"); acc += PART_LDG(in[8 * t]); }
  { PART_REGION("broadcast"); acc += PART_LDG(in[0]); }
  { PART_REGION("half warp"); if (t < 16) acc += PART_LDG(in[t]); }
  { PART_REGION("loop"); for (int i = 0; i < 3; ++i) acc += PART_LDG(in[32 * i + t % 32]); }
  { PART_REGION("shared stride 1"); PART_STS(s[t]) = acc; }
  { PART_REGION("shared stride 2"); PART_STS(s[2 * t]) = acc; }
  { PART_REGION("shared stride 4"); PART_STS(s[4 * t]) = acc; }
  { PART_REGION("shared stride 32"); PART_STS(s[32 * t]) = acc; }
  { PART_REGION("shared stride 33"); PART_STS(s[33 * t]) = acc; }
  { PART_REGION("shared halves"); PART_STS(h[t]) = __float2half(acc); }
  { PART_REGION("shared doubles"); PART_STS(d[t]) = acc; }
  { PART_REGION("shared doubles stride 2"); PART_STS(d[2 * (t % 32)]) = acc; }
  for (int i = t; i < 16 * 24; i += 64) tile[i] = __float2half(1.0f);
  __syncthreads();
  { PART_REGION("shared broadcast"); acc += PART_LDS(s[5]); }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  { PART_REGION("wmma ldm 16"); wmma::load_matrix_sync(a, tile, 16); }
  { PART_REGION("wmma ldm 24"); wmma::load_matrix_sync(b, tile, 24); }
  wmma::mma_sync(c, a, b, c);
  if (t < 32) { PART_REGION("wmma store ldm 16"); wmma::store_matrix_sync(acc_tile, c, 16, wmma::mem_row_major); }
  if (t >= 32) { PART_REGION("wmma store ldm 24"); wmma::store_matrix_sync(acc_tile, c, 24, wmma::mem_row_major); }
  __syncthreads();
  PART_STG(out[64 + t]) = acc + acc_tile[t];
}

int main() {
  // aligned as cudaMalloc aligns (256 bytes): sectors are counted from absolute addresses
  float* in = static_cast<float*>(std::aligned_alloc(256, 1024 * sizeof(float)));
  float* out = static_cast<float*>(std::aligned_alloc(256, 1024 * sizeof(float)));
  emu::launch(patterns, dim3(2), dim3(64), 0, in, out);
  return emu::prof::write("counters.tsv") ? 0 : 1;
}
"""

# region -> (kind, requests, sectors or wavefronts per request, ideal per request)
EXPECTED = {
    "coalesced": [("ldg", 4, 4, 4), ("stg", 4, 4, 4)],  # 32 floats: 128 bytes, 4 sectors
    "stride 2": [("ldg", 4, 8, 4)],  # every other float: 8 sectors for 128 bytes (efficiency 0.5)
    "stride 8": [("ldg", 4, 32, 4)],  # a float per 32-byte sector: 32 sectors for 4 ideal (0.125)
    "broadcast": [("ldg", 4, 1, 1)],  # one float for every lane
    "half warp": [("ldg", 2, 2, 2)],  # lanes 0-15 of the first warp of each block: 64 bytes
    "loop": [("ldg", 12, 4, 4)],  # lane k's i-th load pairs with the others' i-th: 3 requests per warp
    "shared stride 1": [("sts", 4, 1, 1)],
    "shared stride 2": [("sts", 4, 2, 1)],  # lanes k and k + 16 share a bank, at different words
    "shared stride 4": [("sts", 4, 4, 1)],
    "shared stride 32": [("sts", 4, 32, 1)],  # every lane in bank 0
    "shared stride 33": [("sts", 4, 1, 1)],  # lane k in bank k
    "shared halves": [("sts", 4, 1, 1)],  # two lanes per word: 16 words in 16 banks
    "shared doubles": [("sts", 4, 2, 2)],  # 8 bytes: a phase per half-warp, each conflict-free
    "shared doubles stride 2": [("sts", 4, 4, 2)],  # per half-warp, lanes k and k + 8 share banks
    "shared broadcast": [("lds", 4, 1, 1)],
    # ldmatrix: 4 phases of 8 rows x 16 bytes. Rows 32 bytes apart: rows r and r + 4 share
    # banks (2 wavefronts a phase); 48 bytes apart: the 8 rows cover the 32 banks once.
    "wmma ldm 16": [("lds", 4, 8, 4)],
    "wmma ldm 24": [("lds", 4, 4, 4)],
    # float accumulators, per 8x8 block (4 requests per warp): lane 4g + t writes row g,
    # columns 2t and 2t + 1 (8 bytes: half-warp phases of rows 0-3). 16 floats a row: rows
    # 0 and 2 share banks; 24 floats a row: rows 0-3 start at banks 0, 24, 16 and 8.
    "wmma store ldm 16": [("sts", 8, 4, 2)],
    "wmma store ldm 24": [("sts", 8, 2, 2)],
}


def _sites(text: str) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(region, kind) -> (requests, units, ideal), summed over sites."""
    out: dict[tuple[str, str], tuple[int, int, int]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if fields[0] == "site":
            key = (fields[5], fields[2])
            counts = tuple(int(f) for f in fields[6:9])
            out[key] = tuple(a + b for a, b in zip(out.get(key, (0, 0, 0)), counts))
    return out


def test_counters_of_known_access_patterns_follow_the_definitions(tmp_path):
    (tmp_path / "patterns.cu").write_text(PATTERNS_CU)
    subprocess.run(["g++", "-std=c++17", "-O1", "-DPARTITION_EMULATOR", "-DEMU_PROFILE", "-I",
                    str(ROOT / "templates"), "-I", str(ROOT / "backends" / "cuda" / "emulator"), "-x", "c++",
                    "patterns.cu", "-o", "patterns"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["./patterns"], cwd=tmp_path, check=True)
    text = (tmp_path / "counters.tsv").read_text()
    sites = _sites(text)
    for region, expected in EXPECTED.items():
        for kind, requests, units, ideal in expected:
            assert sites.pop((region, kind)) == (requests, units * requests, ideal * requests), (region, kind)
    assert set(sites) == {("", "stg")}, sites  # out[64 + t], outside the regions
    launch = text.splitlines()[0].split("\t")
    # 2 blocks of 2 warps: __syncthreads twice, one shuffle and one mma_sync per warp
    assert launch[:4] == ["launch", "0", "2", "2"]
    assert {"barriers=8", "shuffles=4", "mma=4", "votes=0", "warp_syncs=0"} <= set(launch[4:])


LDMATRIX_CU = r"""
#include "partition_runtime.cuh"

// One warp: fragments loaded by ldmatrix equal those the mma.sync layout formulas read.
__global__ void fragments(int* bad) {
  __shared__ __align__(16) __half tile[16 * 24];  // 16 rows of 16, 8 elements of padding
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  for (int i = lane; i < 16 * 24; i += 32) tile[i] = __float2half(float(i));
  __syncthreads();
  part_frag_a<__half> a;
  part_ldmatrix<4, false>(a.x, &tile[(lane % 8 + 8 * ((lane / 8) & 1)) * 24 + 8 * (lane / 16)]);
  for (int i = 0; i < 8; ++i)
    if (float(a.x[i]) != float(tile[part_frag_a_row(g, i) * 24 + part_frag_a_col(t, i)])) atomicAdd(bad, 1);
  part_frag_b<__half> b, bt;  // B from the tile's rows as columns (K in Q K^T), and transposed (V)
  part_ldmatrix<2, false>(b.x, &tile[(lane % 8) * 24 + 8 * ((lane / 8) & 1)]);
  part_ldmatrix<2, true>(bt.x, &tile[(lane % 8 + 8 * ((lane / 8) & 1)) * 24]);
  for (int i = 0; i < 4; ++i) {
    if (float(b.x[i]) != float(tile[g * 24 + part_frag_b_row(t, i)])) atomicAdd(bad, 1);
    if (float(bt.x[i]) != float(tile[part_frag_b_row(t, i) * 24 + g])) atomicAdd(bad, 1);
  }
}

int main() {
  int bad = 0;
  emu::launch(fragments, dim3(1), dim3(32), 0, &bad);
  std::printf("%d\n", bad);
  return emu::prof::write("counters.tsv") ? 0 : 1;
}
"""


def test_ldmatrix_gives_each_lane_its_mma_fragment_and_counts_as_one_request(tmp_path):
    (tmp_path / "ldmatrix.cu").write_text(LDMATRIX_CU)
    subprocess.run(["g++", "-std=c++17", "-O1", "-DPARTITION_EMULATOR", "-DEMU_PROFILE", "-I",
                    str(ROOT / "templates"), "-I", str(ROOT / "backends" / "cuda" / "emulator"), "-x", "c++",
                    "ldmatrix.cu", "-o", "ldmatrix"], cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run(["./ldmatrix"], cwd=tmp_path, check=True, capture_output=True, text=True)
    assert run.stdout.split() == ["0"]  # no element differs from the layout's formulas
    # x4, x2 and x2.trans: one request each, a quarter-warp phase per 8x8 matrix; rows 48
    # bytes apart put a matrix's 8 rows of 16 bytes in distinct banks: a wavefront per phase
    assert _sites((tmp_path / "counters.tsv").read_text()) == {("", "lds"): (3, 8, 8)}


def _kernels():
    """One plan, one kernel per op: a coalesced add, an add of a broadcast row, a
    transpose, a 2x2 max-pool of stride 2, a row sum, and float32 (CUDA cores) and
    float16 (tensor-core: ldmatrix and mma.sync) products."""
    g = make_graph({"x": ([64, 64], "float16"), "y": ([64, 64], "float16"), "v": ([64], "float16"),
                    "img": ([1, 2, 64, 128], "float16"), "r": [16, 64],
                    "a": [64, 64], "b": [64, 64], "p": ([64, 64], "float16"), "q": ([64, 64], "float16")}, [
        op("add", "add", ["x", "y"]), op("biased", "add", ["x", "v"]), op("xt", "transpose", ["x"], perm=[1, 0]),
        op("pool", "max_pool2d", ["img"], kernel_shape=[2, 2], strides=[2, 2]), op("rows", "reduce_sum", ["r"], axes=[1]), op("mm32", "matmul", ["a", "b"]),
        op("mm16", "matmul", ["p", "q"])], ["add", "biased", "xt", "pool", "rows", "mm32", "mm16"])
    return g, partition(g, "none")


@pytest.fixture(scope="module")
def counted():
    g, plan = _kernels()
    rendered = render(plan)
    values = input_values(g, 0)
    out, counters = run_profiled(rendered, values)
    plain = run_emulated(rendered, values)
    return {c.kernel.ops[-1]: c for c in counters}, out, plain


def test_profiling_changes_no_result(counted):
    _, out, plain = counted
    assert out.keys() == plain.keys()
    for name in out:
        assert np.array_equal(out[name].view(np.uint8), plain[name].view(np.uint8)), name


def test_a_coalesced_pointwise_kernel_is_fully_efficient(counted):
    add = counted[0]["add"]
    # 64 x 64 halves, 8 per lane: each warp loads and stores 512 contiguous bytes (16 sectors)
    for kind in ("ldg", "stg"):
        r = add.requests(kind)
        assert r.efficiency == 1.0 and r.units == 16 * r.requests, kind
    assert add.requests("ldg").requests == 2 * add.requests("stg").requests == 2 * 64 * 64 // 8 // 32
    assert add.requests("lds").requests == add.requests("sts").requests == 0


def test_a_broadcast_row_read_with_its_lanes_at_consecutive_elements(counted):
    biased = counted[0]["biased"]
    # v[i % 64] read one element at a time: with 8 consecutive elements per lane, lanes
    # would read halves 16 bytes apart (a sector per 2 lanes: efficiency 0.125). Lanes at
    # consecutive elements instead: each request is 32 consecutive halves, 64 bytes in 2
    # sectors, for x, v and the store alike; 4096 elements in 32-wide runs, 128 requests.
    for kind in ("ldg", "stg"):
        r = biased.requests(kind)
        assert r.efficiency == 1.0 and r.units == 2 * r.requests, kind
    assert biased.requests("ldg").requests == 2 * biased.requests("stg").requests == 2 * 128


def test_a_strided_pooling_window_reads_its_input_rows_staged_in_memory_order(counted):
    pool = counted[0]["pool"]
    # each tap reads img[.., 2 * oh + dy, 2 * ow + dx]: lanes at consecutive outputs read
    # every other half (64 of 128 bytes: 4 sectors, ideal 2; efficiency 0.5, as it was).
    # Staged (cost.WindowRows), lanes at consecutive halves load the tile's rows: 64
    # bytes, 2 sectors per request, and the taps read them from shared memory
    load = pool.requests("ldg")
    assert load.units == 2 * load.requests and load.efficiency == 1.0
    assert pool.requests("stg").efficiency == 1.0


def test_a_transpose_is_staged_through_a_tile_and_coalesced_both_ways(counted):
    xt = counted[0]["xt"]
    # lanes along x's rows read 32 consecutive halves (64 bytes, 2 sectors) into a tile of
    # 32 x 33 halves, then store 32 consecutive halves of xt's rows: both coalesced, where
    # a lane writing 8 halves of xt read x 256 bytes apart (efficiency 0.25); the tile's
    # column reads, 33 halves apart, fall on 32 banks (one wavefront per request)
    for kind in ("ldg", "stg"):
        r = xt.requests(kind)
        assert r.efficiency == 1.0 and r.units == 2 * r.requests, kind
    for kind in ("lds", "sts"):
        r = xt.requests(kind)
        assert r.requests == 64 * 64 // 32 and r.units == r.requests, kind


def test_float32_product_main_loop_meets_no_bank_conflict(counted):
    mm = counted[0]["mm32"]
    # thread (tr, tc) = (tid / 16, tid % 16) reads a_s[(tr + 16*i)*33 + kk] and
    # b_s[kk*128 + tc + 16*j]: a warp's two tr are 33 words apart (two banks, one
    # wavefront), its 16 tc consecutive words (the other 16 lanes read the same ones).
    # Unpadded, with 8 consecutive rows and columns per thread, they were 2- and 4-way.
    sites = [s for s in mm.sites if s.kind == "lds" and s.region == "main loop"]
    ways = {s.label.split("[")[0]: s.counts.units / s.counts.requests for s in sites}
    assert ways == {"a_s": 1.0, "b_s": 1.0}
    assert all(s.counts.ideal == s.counts.requests for s in sites)
    assert mm.requests("lds", "main loop").per_request == 1.0


def test_float16_product_main_loop_fragments_meet_no_bank_conflict(counted):
    mm = counted[0]["mm16"]
    # ldmatrix.x4 phases of 8 rows x 16 bytes (A plain from its m-major tile, B transposed
    # from its n-major one): unpadded, A rows 32 halves (64 bytes) apart shared banks
    # with rows r + 2 (16 wavefronts per request, 4x), B rows 128 halves (256 bytes)
    # apart all the same 4 banks (32, 8x); padded by 16 bytes (80- and 272-byte rows)
    # every phase's 8 rows fall on distinct banks: 4 wavefronts per request, the ideal
    sites = [s for s in mm.sites if s.region == "main loop"]
    assert [s.label for s in sites] == ["ldmatrix"]  # A's and B's forms: one line of the runtime header
    assert all((s.counts.per_request, s.counts.ideal_per_request) == (4, 4) for s in sites)
    assert mm.requests("lds", "main loop").per_request == 4.0
    # 64 x 64 x 64: one block of 8 warps, 2 K steps of 32, each two of 16 with 4 x 4 mma.sync m16n8k16
    assert mm.ops["mma"] == 8 * 2 * 2 * 16 and mm.ops["barriers"] > 0


def test_a_warp_per_row_reduction_counts_its_shuffles(counted):
    rows = counted[0]["rows"]
    # 16 rows of 64: a warp per row, 5 butterfly shuffles per row, no barrier; a row of
    # 64 floats is 16 chunks of 16 bytes, one load request (16 lanes) per row
    assert rows.ops["shuffles"] == 16 * 5 and rows.ops["barriers"] == 0
    loads = rows.requests("ldg")
    assert loads.efficiency == 1.0 and loads.requests == 16 and loads.bytes == 16 * 64 * 4


# A matmul by a transposed weight (Llama's projections), a matmul of a transposed
# activation, a 1x1 conv (NCHW: the pixels of a channel are consecutive), one with a
# per-channel prologue, and a 3x3 conv.
OPERAND_LAYOUTS = {
    "weight_transposed": make_graph({"x": ([256, 64], "float16"), "w": ([128, 64], "float16")},
                                    [op("wt", "transpose", ["w"], perm=[1, 0]), op("y", "matmul", ["x", "wt"])],
                                    ["y"]),
    "activation_transposed": make_graph({"x": ([64, 256], "float16"), "w": ([64, 128], "float16")},
                                        [op("xt", "transpose", ["x"], perm=[1, 0]), op("y", "matmul", ["xt", "w"])],
                                        ["y"]),
    "conv_1x1": make_graph({"x": ([2, 64, 16, 16], "float16"), "w": ([128, 64, 1, 1], "float16")},
                           [op("y", "conv2d", ["x", "w"])], ["y"]),
    # a per-channel scale and shift before the conv (a batch norm in its prologue): the
    # parameters are read at the channel, coalesced along m (one address) as along k, so
    # they must not pull the walk off the pixels (they did: efficiency 1/16)
    "conv_1x1_scaled": make_graph({"x": ([2, 64, 16, 16], "float16"), "s": ([64, 1, 1], "float16"),
                                   "b": ([64, 1, 1], "float16"), "w": ([128, 64, 1, 1], "float16")},
                                  [op("xs", "mul", ["x", "s"]), op("xb", "add", ["xs", "b"]),
                                   op("y", "conv2d", ["xb", "w"])], ["y"]),
    "conv_3x3_float32": make_graph({"x": [2, 8, 16, 16], "w": [128, 8, 3, 3]},
                                   [op("y", "conv2d", ["x", "w"], pads=[1, 1, 1, 1])], ["y"]),
}


@pytest.mark.parametrize("name", OPERAND_LAYOUTS)
def test_contraction_tiles_load_and_store_along_consecutive_addresses(name):
    """Consecutive threads load consecutive addresses of each operand, whichever tile
    axis that is: full sectors. (Before, the threads walked A along k and B along n
    whatever the layout: a transposed operand read 2 bytes per 32-byte sector.)"""
    g = OPERAND_LAYOUTS[name]
    rendered = render(partition(g, "ilp"))
    out, counted = run_profiled(rendered, input_values(g, 0))
    (mm,) = [c for c in counted if c.kernel.kind == "contraction"]
    loads = mm.requests("ldg", "tile loads")
    assert loads.efficiency == 1.0, loads
    assert mm.requests("lds", "main loop").conflict == 1.0
    # the epilogue's lanes take consecutive n, or consecutive m for an NCHW conv's pixels
    # (along n, a conv's stores were a channel plane apart: 1/8 of each sector)
    assert mm.requests("stg").efficiency == 1.0
    checks = run_and_check(partition(g, "ilp"), EMULATOR, inputs=input_values(g, 0))
    assert all(c.ok for c in checks), checks


# NCHW convs whose lanes at consecutive pixels would straddle sectors: a 3x3 window on
# rows of 11 (its k runs 3 elements, then jumps a row), a stride of 2, and 1x1 convs on
# images of 49 and 196 pixels (not a whole number of 32-byte sectors). Each has K a
# multiple of 16, so that the weight's rows start on sectors too.
UNALIGNED_CONVS = {
    "3x3_rows_of_11": ((2, 16, 9, 11), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "float16"),
    "1x1_stride_2": ((2, 32, 14, 14), (64, 32, 1, 1), {"strides": [2, 2]}, "float16"),
    "1x1_images_of_49": ((4, 32, 7, 7), (64, 32, 1, 1), {}, "float16"),
    "1x1_images_of_196_float32": ((2, 32, 14, 14), (64, 32, 1, 1), {}, "float32"),
    "3x3_images_of_9": ((20, 16, 3, 3), (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "float16"),
}


@pytest.mark.parametrize("name", sorted(UNALIGNED_CONVS))
def test_unaligned_conv_tiles_load_and_store_whole_sectors(name):
    """The A tile is staged from input rows loaded between aligned addresses
    (``cost.ConvRows``): every load request covers whole sectors. The output tile is
    staged and stored run by run from aligned addresses (``cost.ConvOutRuns``; an image
    the tile holds whole is one run over its channels): only a request holding both
    ends of a run of at most 16 elements (a tile's last pixels of an image) takes two
    sectors for one ideal. Before, lanes at 16 consecutive
    pixels from an unaligned address took 3 sectors for 2 (and a stride of 2, twice
    the sectors): load efficiency 0.25 to 0.89, stores 0.45 to 0.56 on ResNet-50."""
    x, w, attrs, dtype = UNALIGNED_CONVS[name]
    g = make_graph({"x": (list(x), dtype), "w": (list(w), dtype)}, [op("y", "conv2d", ["x", "w"], **attrs)], ["y"],
                   dtype=dtype)
    rendered = render(partition(g, "ilp"))
    _, counted = run_profiled(rendered, input_values(g, 0))
    (conv,) = [c for c in counted if c.kernel.kind == "contraction"]
    assert conv.requests("ldg").efficiency == 1.0, conv.requests("ldg")
    assert conv.requests("stg").efficiency >= 0.95, conv.requests("stg")
    assert conv.requests("lds", "main loop").conflict == 1.0


# Rows of no even length, read element by element, each starting wherever the last ended:
# ResNet-50's global mean over 7 x 7 pixels (a warp per row), a softmax over 77 keys
# (written back along the row) and over 301 (a block per row, a row buffer in shared
# memory), an argmax.
ODD_ROWS = {
    "mean_of_49": make_graph({"x": ([6, 40, 7, 7], "float16")}, [op("m", "reduce_mean", ["x"], axes=[2, 3])], ["m"],
                             dtype="float16"),
    "softmax_of_77": make_graph({"x": ([37, 77], "float16")}, [op("s", "softmax", ["x"], axis=-1)], ["s"],
                                dtype="float16"),
    "softmax_of_301_float32": make_graph({"x": ([9, 301], "float32")}, [op("s", "softmax", ["x"], axis=-1)], ["s"]),
    "argmax_of_45": make_graph({"x": ([11, 3, 45], "float16")}, [op("a", "argmax", ["x"], axes=[2])], ["a"],
                               dtype="float16"),
}


@pytest.mark.parametrize("name", sorted(ODD_ROWS))
def test_rows_read_one_by_one_start_at_their_first_sector(name):
    """The lanes start at the sector holding the row's first element, those before it
    adding nothing (and writing what the lane at the first element writes): every
    request covers whole sectors. Before, a row starting inside a sector took one
    sector more per request: 0.81 (the mean), 0.66, 0.84 and 0.65 of ideal."""
    g = ODD_ROWS[name]
    _, counted = run_profiled(render(partition(g, "ilp")), input_values(g, 2))
    (row,) = [c for c in counted if c.kernel.kind == "reduction"]
    assert row.requests("ldg").efficiency == 1.0, row.requests("ldg")
    assert row.requests("stg").efficiency == 1.0, row.requests("stg")
    checks = run_and_check(partition(g, "ilp"), EMULATOR, inputs=input_values(g, 2))
    assert all(c.ok for c in checks), checks


def _pool(kind, x, dtype, before=False, after=False, **attrs):
    """A pool of ``x``, after a ReLU (recomputed per tap unless staged) and before a scale."""
    ops, src = [], "x"
    if before:
        ops, src = [op("r", "relu", ["x"])], "r"
    ops.append(op("p", kind, [src], **attrs))
    if after:
        ops.append(op("q", "mul", ["p", 2.0]))
    return make_graph({"x": (list(x), dtype)}, ops, ["q" if after else "p"], dtype=dtype)


# ResNet-50's stem pool (3 x 3, stride 2, padded), averages of stride 2, with ceil_mode and
# count_include_pad, a stride-1 pool of rows of 37, and a dilated window on rows wider than a tile.
STAGED_POOLS = {
    "max_3x3_stride_2": _pool("max_pool2d", (2, 5, 23, 23), "float16", True, kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
    "avg_2x2_stride_2_float32": _pool("avg_pool2d", (2, 3, 14, 15), "float32", after=True, kernel_shape=[2, 2],
                                      strides=[2, 2]),
    "max_3x3_stride_1": _pool("max_pool2d", (1, 4, 9, 37), "bfloat16", kernel_shape=[3, 3], strides=[1, 1],
                              pads=[1, 1, 1, 1]),
    "avg_ceil_counting_pads": _pool("avg_pool2d", (2, 2, 11, 11), "float16", True, True, kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True, count_include_pad=True),
    "max_dilated_wide": _pool("max_pool2d", (1, 3, 30, 300), "float32", kernel_shape=[3, 2], strides=[2, 3],
                              dilations=[2, 1]),
}


@pytest.mark.parametrize("name", sorted(STAGED_POOLS))
def test_a_pool_stages_its_input_rows_and_stores_from_aligned_addresses(name):
    """Each tile of output rows stages the input rows it reads from an aligned address,
    and stores its outputs from one: whole sectors both ways (the stem's pool read 0.33
    of ideal on ResNet-50), the values as the NumPy reference gives them."""
    g = STAGED_POOLS[name]
    rendered = render(partition(g, "ilp"))
    assert "tile_base" in rendered.kernels[0].source
    _, counted = run_profiled(rendered, input_values(g, 3))
    (pool,) = counted
    assert pool.requests("ldg").efficiency == 1.0 and pool.requests("stg").efficiency == 1.0, pool
    checks = run_and_check(partition(g, "ilp"), EMULATOR, inputs=input_values(g, 3))
    assert all(c.ok for c in checks), checks


def test_a_pool_whose_input_the_group_reads_or_writes_elsewhere_is_not_staged():
    """The staged rows stand for the pool's input only where the pool alone reads it:
    not where the group writes it too, or reads it through a view."""
    g = make_graph({"x": ([2, 3, 9, 9], "float16")}, [
        op("r", "relu", ["x"]), op("p", "max_pool2d", ["r"], kernel_shape=[3, 3], strides=[2, 2]),
        op("v", "reshape", ["r"], shape=[2, 3, 81]), op("s", "slice", ["v"], axes=[2], starts=[0], ends=[16]),
        op("t", "reshape", ["s"], shape=[2, 3, 4, 4]), op("y", "add", ["p", "t"])], ["r", "y"], dtype="float16")
    assert window_rows(Group(g, g.mask(["r", "p"]))) is None  # r written
    assert window_rows(Group(g, g.mask(["r", "p", "v", "s", "t", "y"]))) is None  # r read through views
    assert window_rows(Group(g, g.mask(["p"]))).source == "r"


@pytest.mark.parametrize("dtype,d", [("float16", 64), ("float32", 32), ("bfloat16", 256)])
def test_attention_stores_its_output_coalesced(dtype, d):
    """The output goes through shared memory: consecutive lanes store consecutive dv
    (from the accumulator's layout a lane stored 2 of every 8 elements of a row)."""
    g = attention(sq=70, sk=65, d=d, dtype=dtype)
    _, counted = run_profiled(render(partition(g, "ilp")), input_values(g, 0))
    (kernel,) = [c for c in counted if c.kernel.kind == "attention"]
    assert kernel.requests("stg", "epilogue").efficiency == 1.0


@pytest.mark.parametrize("mask", ["causal", "padding", "additive", "bias"])
def test_attention_reads_masks_and_biases_through_coalesced_tiles(mask):
    """A mask or bias is staged in shared memory a key tile at a time, consecutive
    threads at consecutive keys; read where the scores' accumulator layout puts each
    lane (2 of every 8 keys of 8 rows a warp), it took a quarter of each sector. (Rows
    of an odd key count start mid-sector: whole sectors need aligned rows.)"""
    g = attention(sq=128, sk=192, d=32, mask=mask)
    plan = partition(g, "ilp")
    _, counted = run_profiled(render(plan), input_values(g, 0))
    (kernel,) = [c for c in counted if c.kernel.kind == "attention"]
    assert kernel.requests("ldg").efficiency >= 0.9, kernel.requests("ldg")
    assert kernel.requests("ldg", "main loop").requests == 0
    assert kernel.requests("lds", "main loop").conflict == 1.0  # the tiles' 16-byte row padding
    checks = run_and_check(plan, EMULATOR, inputs=input_values(g, 0))
    assert all(c.ok for c in checks), checks


@pytest.mark.parametrize("expression,value", [
    ("7 / 2", 3), ("-7 / 2", -3), ("7 / -2", -3), ("-7 % 2", -1), ("7 % -2", 1), ("(idx_t)(i - 9) / 4 * 2", -2),
    ("i * 3 + -1", 14), ("i ? 1 : 2", 1), ("f(i)", None), ("i / 0", None), ("missing + 1", None),
    # a concat's clamped part index (the codegen's form), C's precedence and associativity
    ("(i - 64 < 0 ? 0 : (i - 64 > 63 ? 63 : i - 64))", 0), ("(i < 0 ? 0 : (i > 3 ? 3 : i))", 3),
    ("i - 2 - 1", 2), ("3 % 2 * 5", 5), ("i < 3 || i == 5", 1), ("!i && 1", 0), ("0 ? 1 : 0 ? 4 : 5", 5),
    ("1.5 * i", None), ("i >> 1", None), ("a[i]", None), ("(int64_t)i", None), ("i +", None),
])
def test_the_load_order_reads_index_arithmetic_as_c_does(expression, value):
    assert c_integer(expression, {"i": 5}) == value


@pytest.mark.parametrize("lines,index,fast,expected", [
    ([], "n * 4096 + k", "k", True), ([], "n * 4096 + k", "n", False), ([], "k * 768 + n", "n", True),
    ([], "n * 4100 + k", "k", False),  # rows 4100 elements apart: a run's start is not 16-byte aligned
    ([], "n * 4096 + k + 3", "k", False), ([], "2 * k", "k", False), ([], "bz * 64 + k", "k", True),
    (["const idx_t i1 = k - 1;"], "i1", "k", False),  # subtractions are not followed
    # GPT-2's attention output, permuted by heads and copied, read by the output projection
    (["const idx_t i1 = m * 768 + k;", "const idx_t i5 = (i1) / 768 * 768 + (i1) % 768;",
      "const idx_t i8 = ((i5) / 64) % 12;", "const idx_t i9 = (i5) % 64;", "const idx_t i7 = ((i5) / 768) % 1024;"],
     "i8 * 65536 + i7 * 64 + i9", "k", True),
    ([], "(k / 9) * 9 + k % 9", "k", False),  # 9 is no multiple of the run: not followed
    ([], "(k / 3) * 8 + k", "k", False),  # k / 3 changes within a run
    ([], "(k + 4) / 8 * 8 + k", "k", False),  # runs of k + 4 straddle multiples of 8
    ([], "k % 12 + m * 8", "k", False), ([], "k % 24 + m * 24", "k", True), ([], "(k / 8) * 8 + k % 8", "k", True),
    ([], "(k < 3 ? k : 3)", "k", False),
])
def test_contiguous_runs_are_proved_from_the_index_arithmetic(lines, index, fast, expected):
    assert contiguous_runs(lines, index, fast, 8) is expected


def test_what_contiguous_runs_proves_holds_at_every_run():
    """Random index expressions of the codegen's forms (k nested in sums, products,
    quotients and remainders); wherever the analysis says runs of 8 are aligned and
    consecutive, every run over a grid of the variables is."""
    rng = np.random.default_rng(7)

    def term(depth: int) -> str:
        choice = rng.integers(0, 5 if depth else 2)
        if choice == 0:
            return str(rng.choice([1, 3, 8, 16, 24, 64]))
        if choice == 1:
            return str(rng.choice(["k", "m", "k", "k", "bz"]))
        if choice == 2:
            return f"({term(depth - 1)} + {term(depth - 1)})"
        if choice == 3:
            return f"{term(depth - 1)} * {rng.choice([1, 2, 8, 24, 64])}"
        return f"({term(depth - 1)}) {rng.choice(['/', '%'])} {rng.choice([3, 8, 16, 24, 64])}"

    proved = 0
    for _ in range(1500):
        index = term(4)
        if not contiguous_runs([], index, "k", 8):
            continue
        proved += 1
        for m in (0, 5):
            for bz in (0, 3):
                for start in range(0, 96, 8):
                    run = [c_integer(index, {"k": start + r, "m": m, "bz": bz}) for r in range(8)]
                    assert run[0] % 8 == 0 and run == list(range(run[0], run[0] + 8)), (index, m, bz, start)
    assert proved > 20  # the check above ran on many expressions


def test_counting_needs_the_emulator():
    with pytest.raises(BackendError, match="profile needs emulate"):
        CudaBackend(profile=True)


def test_profile_on_the_command_line(tmp_path, capsys):
    g, _ = _kernels()
    path = tmp_path / "g.json"
    data = {"name": "g", "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype} for n, t in g.inputs.items()],
            "ops": [{"name": o.name, "op": o.kind, "inputs": list(o.inputs), "attrs": dict(o.attrs)}
                    for o in g.ops.values()], "outputs": list(g.outputs)}
    path.write_text(json.dumps(data))
    assert main([str(path), "--strategy", "none", "--run", "--backend", "cuda", "--emulate", "--profile",
                 "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_op = {k["ops"][-1]: k for k in report["counters"]}
    assert by_op["xt"]["global"]["load"]["efficiency"] == 1.0  # a tiled transpose
    # per kk step a warp loads 4 A fragments and 2 B fragments, 4 wavefronts each: the ideal
    main_loop = by_op["mm16"]["regions"]["main loop"]["shared"]["load"]
    assert main_loop["wavefronts_per_request"] == 4.0 and main_loop["conflict_factor"] == 1.0
    assert main([str(path), "--strategy", "none", "--run", "--backend", "cuda", "--emulate", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "Memory counters per kernel" in text and "Instruction mix" in text
    assert "main loops: shared-memory operand reads take at most 1.00x their ideal wavefronts" in text
    with pytest.raises(SystemExit) as bad:
        main([str(path), "--run", "--backend", "cuda", "--profile"])
    assert bad.value.code == 2 and "--profile counts on the CPU emulator" in capsys.readouterr().err
    assert main([str(path), "--strategy", "none", "--run", "--backend", "cuda", "--emulate", "--profile",
                 "--sample-blocks", "1", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert ("add", 1, 2) in {(r["name"], r["blocks"], r["grid_blocks"]) for r in report["run"]}
    assert {k["blocks"] for k in report["counters"]} == {1}
    with pytest.raises(SystemExit) as bad:
        main([str(path), "--run", "--backend", "cuda", "--emulate", "--sample-blocks", "2"])
    assert bad.value.code == 2 and "--sample-blocks applies to --profile" in capsys.readouterr().err


def test_a_sample_is_the_first_last_and_evenly_spaced_blocks():
    assert sample(1152, 8) == [0, 164, 329, 493, 658, 822, 987, 1151]
    assert sample(5, 8) == [0, 1, 2, 3, 4] and sample(7, 1) == [0]


def test_only_the_elements_a_sample_wrote_are_checked():
    g, plan = _kernels()
    runs = [np.frombuffer(bytes([fill]) * 2 * 64 * 64, dtype=np.float16).reshape(64, 64).copy()
            for fill in FILLS]  # nothing written
    want = np.ones((64, 64), dtype=np.float16)
    for run in runs:
        run[3, 5] = 1.0
    assert check_written(plan, "add", runs, want)[0] == 1 and check_written(plan, "add", runs, want)[1].ok
    for run in runs:
        run[7, 0] = 1.5  # a wrong element
    checked, check = check_written(plan, "add", runs, want)
    assert checked == 2 and not check.ok
    runs[1][0, 0] = 2.0  # wrong in one run only: the kernel reads what it has not written
    assert not check_written(plan, "add", runs, np.where(np.arange(64) == 7, 1.5, want).astype(np.float16))[1].ok


@pytest.mark.parametrize("dtype, value", [("int8", -1), ("int32", -1), ("float32", 0)])
def test_a_value_written_as_a_fill_is_still_checked(dtype, value):
    """An output whose every element is all 0xFF bytes (an integer -1) or all 0x00
    bytes: each run's fill hides it in that run only, so every element a sampled
    block wrote is checked (an all -1 output was taken as unwritten, and failed)."""
    g = make_graph({"x": [4, 4096]}, [op("z", "sub", ["x", "x"]), op("c", "cast", ["z"], dtype=dtype),
                                      op("y", "add", ["c", value])], ["y"], dtype=dtype)
    plan = partition(g, "ilp")
    backend = CudaBackend(emulate=True, profile=True)
    (every,) = backend.check_sampled(plan, 0, 10**6)
    assert every.ok and every.checked == every.elements == 4 * 4096
    (some,) = backend.check_sampled(plan, 0, 1)
    assert some.ok and 0 < some.checked < some.elements and some.grid_blocks > 1


def test_kernels_run_alone_on_sampled_blocks_and_count_them(counted):
    g, plan = _kernels()
    backend = CudaBackend(emulate=True, profile=True)
    checks = backend.check_sampled(plan, 0, 1)
    assert all(c.ok and c.blocks == 1 for c in checks), [c for c in checks if not c.ok]
    add = next(c for c in checks if c.check.name == "add")
    assert (add.grid_blocks, add.checked, add.elements) == (2, 256 * 8, 64 * 64)  # one block: 256 lanes x 8
    # one block of the transpose's four (a 32 x 32 tile each): a quarter of the requests
    # of the whole run, as efficient
    whole, alone = counted[0]["xt"].requests("ldg"), next(c for c in backend.counted if c.kernel.ops == ("xt",))
    assert alone.blocks == 1 and alone.grid_blocks == 4
    assert 4 * alone.requests("ldg").requests == whole.requests
    assert alone.requests("ldg").efficiency == whole.efficiency


def test_an_attention_key_stored_transposed_is_read_along_the_keys():
    """K as [batch, heads, d, keys] (written transposed for the scores): the K tile's
    threads walk the keys, so its reads are whole sectors (along d they were 2 bytes
    a sector, efficiency 1/16); Q and V, stored row by row, keep walking d."""
    g = make_graph({"q": ([2, 3, 64, 64], "float16"), "kt": ([2, 3, 64, 128], "float16"),
                    "v": ([2, 3, 128, 64], "float16")}, [
        op("s", "matmul", ["q", "kt"]), op("p", "softmax", ["s"], axis=-1), op("o", "matmul", ["p", "v"])], ["o"],
        dtype="float16")
    rendered = render(partition(g, "ilp"))
    (kernel,) = rendered.kernels
    assert "const idx_t k = k0 + e % 64, d = e / 64;" in kernel.source  # keys fastest
    assert "const idx_t k = k0 + e / 64, dv = e % 64;" in kernel.source  # V along dv
    _, counters = run_profiled(rendered, input_values(g, 0))
    (counted,) = counters
    assert counted.requests("ldg").efficiency == 1.0


def test_a_sampled_kernel_of_an_ill_conditioned_output_is_checked_against_the_references_spread():
    """Kernels run alone are checked as --run checks outputs: sin(20·q·k), one kernel,
    turns the product's absolute rounding errors into errors of a result of at most
    1, beyond the ulp-based rule, and passes against the reference's spread."""
    g = make_graph({"q": [2, 16, 32], "k": [2, 32, 24]},
                   [op("s", "matmul", ["q", "k"]), op("z", "mul", ["s", 20.0]), op("e", "sin", ["z"])], ["e"])
    plan = partition(g, "ilp")
    assert len(plan.groups) == 1
    (check,) = CudaBackend(emulate=True, profile=True).check_sampled(plan, 0, 10**6)
    assert check.ok and check.check.ill_conditioned, check
