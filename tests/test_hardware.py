"""Hardware profiles: every number has a source; user profiles are checked."""

from __future__ import annotations

import dataclasses
import math

import pytest

from partitioner import PROFILES, HardwareError, load_hardware

from .conftest import ROOT


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_number_has_a_source(name):
    hw = PROFILES[name]
    numbers = [f.name for f in dataclasses.fields(hw) if f.name not in ("name", "sources")]
    assert sorted(hw.sources) == sorted(numbers)
    assert all(hw.sources.values())


def test_known_values_and_exact_launch_bytes():
    assert load_hardware("H200").hbm_bandwidth_gb_per_s == 4800
    assert load_hardware("a100").smem_per_block_optin_bytes == 163 * 1024
    assert load_hardware("h100").launch_bytes == 3_350_000  # 1 us at 3.35 TB/s


def test_user_profile(tmp_path):
    path = tmp_path / "mygpu.yaml"
    path.write_text("base: a100\nlaunch_overhead_us: 2.5\nsources: {launch_overhead_us: \"measured, 10k empty kernels\"}\n")
    hw = load_hardware(str(path))
    assert hw.name == "mygpu" and hw.launch_overhead_us == 2.5 and hw.sm_count == 108
    assert hw.sources["launch_overhead_us"].startswith("measured")


def test_energies_default_to_the_cited_estimates_and_a_profile_may_give_its_own(tmp_path):
    full = {f.name: getattr(PROFILES["h100"], f.name) for f in dataclasses.fields(PROFILES["h100"])
            if f.name not in ("name", "sources") and not f.name.endswith(("_per_byte", "_per_flop"))}
    path = tmp_path / "full.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in full.items())
                    + "sources:\n" + "".join(f"  {k}: datasheet\n" for k in full))
    hw = load_hardware(str(path))  # written before the energies existed: still loads
    assert hw.hbm_pj_per_byte == 31.2 and "O'Connor" in hw.sources["hbm_pj_per_byte"]
    assert (hw.hbm_energy_fj, hw.sram_energy_fj, hw.flop_energy_fj("float16", True),
            hw.flop_energy_fj("float16", False), hw.flop_energy_fj("float64", False)) == (31200, 1250, 750, 2300, 4600)
    own = tmp_path / "own.yaml"
    own.write_text("base: h100\nhbm_pj_per_byte: 25.6\nsources: {hbm_pj_per_byte: \"HBM3, 3.2 pJ/bit\"}\n")
    assert load_hardware(str(own)).hbm_energy_fj == 25600
    own.write_text("base: h100\nhbm_pj_per_byte: 25.6\n")
    with pytest.raises(HardwareError, match="give a source for hbm_pj_per_byte"):
        load_hardware(str(own))


@pytest.mark.parametrize("text,problem", [
    ("launch_overhead_us: 2\n", "missing field"),
    ("base: h100\nlaunch_overhead_us: 2\n", "give a source"),
    ("base: h100\nwarp_size: 32\n", "Additional properties"),
    ("base: h100\nsm_count: -1\nsources: {sm_count: x}\n", "less than or equal"),
    ("- 1\n", "mapping"),
    ("inputs: {x: [4]}\nops: []\noutputs: [x]\n", "this is an operator graph, not a hardware profile"),
])
def test_bad_profiles(tmp_path, text, problem):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(HardwareError, match=problem):
        load_hardware(str(path))


def test_unknown_name():
    with pytest.raises(HardwareError, match="unknown hardware 'v100'"):
        load_hardware("v100")


@pytest.mark.parametrize("text,problem", [
    ("base: h100\nhbm_bandwidth_gb_per_s: .inf\nsources: {hbm_bandwidth_gb_per_s: x}\n", "finite"),
    ("base: h100\nlaunch_overhead_us: .nan\nsources: {launch_overhead_us: x}\n", "finite"),
    ("base: h100\nregisters_per_thread: 0.5\nsources: {registers_per_thread: x}\n", "integer"),
    ("base: h100\nsources: {warp_size: x}\n", "warp_size"),
    # a bandwidth so small that integer time had no unit: a ZeroDivisionError (exit 1)
    ("base: h100\nhbm_bandwidth_gb_per_s: 1.0e-10\nsources: {hbm_bandwidth_gb_per_s: x}\n", "under one byte per"),
    # a launch under one byte rounded to no cost: modelled time fell below traffic time
    ("base: h100\nhbm_bandwidth_gb_per_s: 1.0e-7\nsources: {hbm_bandwidth_gb_per_s: x}\n", "under one byte:"),
    # energies of 1e300 made every modelled total overflow a float: an OverflowError (exit 1)
    ("base: h100\nhbm_pj_per_byte: 1.0e+300\nsources: {hbm_pj_per_byte: x}\n", "hbm_pj_per_byte: .* maximum"),
    # a peak of 5e-324 made a FLOP's time overflow a float in the heuristics (exit 1)
    ("base: h100\npeak_fp16_tensor_tflops: 5.0e-324\nsources: {peak_fp16_tensor_tflops: x}\n",
     "peak_fp16_tensor_tflops: .* minimum"),
    # budgets no GPU has were accepted, and every kernel was then reported over them
    ("base: h100\nsmem_per_block_optin_bytes: 1000\nsources: {smem_per_block_optin_bytes: x}\n",
     "smem_per_block_default_bytes 49152 is above smem_per_block_optin_bytes 1000"),
    ("base: a100\nsmem_per_block_optin_bytes: 200000\nsources: {smem_per_block_optin_bytes: x}\n",
     "smem_per_block_optin_bytes 200000 is above smem_per_sm_bytes 167936"),
    ("base: h100\nregisters_per_sm: 128\nsources: {registers_per_sm: x}\n",
     "registers_per_thread 255 is above registers_per_sm 128"),
    # energies of a fraction of a femtojoule were rounded: 0.0004 pJ a byte to 0, 31.23456 to 31.235
    ("base: h100\nhbm_pj_per_byte: 0.0004\nsources: {hbm_pj_per_byte: x}\n",
     "hbm_pj_per_byte 0.0004 is not a whole number of femtojoules"),
    ("base: h100\ntensor_pj_per_flop: 31.23456\nsources: {tensor_pj_per_flop: x}\n",
     "tensor_pj_per_flop 31.23456 is not a whole number of femtojoules"),
    # a profile that says it is h100 but is not: its plans said "h100" with other numbers
    ("name: h100\nbase: h100\nhbm_bandwidth_gb_per_s: 100\nsources: {hbm_bandwidth_gb_per_s: x}\n",
     "named 'h100', a built-in profile's name, but changes its numbers"),
    ("name: a\nbase: h100\nsm_count: 100\nsources: {sm_count: ''}\n", "sources.sm_count: must not be empty"),
    ("name: ' '\nbase: h100\n", "name: must not be empty"),
    ("name: ' h100'\nbase: h100\nlaunch_overhead_us: 2\nsources: {launch_overhead_us: x}\n", "a built-in profile's"),
])
def test_profile_numbers_are_checked(tmp_path, text, problem):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(HardwareError, match=problem):
        load_hardware(str(path))


def test_a_profile_with_many_decimals_still_gets_a_proven_plan(tmp_path):
    from partitioner import load_graph, partition


    path = tmp_path / "frac.yaml"
    path.write_text("base: h100\nhbm_bandwidth_gb_per_s: 3350.123456789\nlaunch_overhead_us: 1.23456789\n"
                    "sources: {hbm_bandwidth_gb_per_s: x, launch_overhead_us: y}\n")
    hw = load_hardware(str(path))
    assert hw.launch_bytes.denominator <= 1000
    plan = partition(load_graph(ROOT / "graphs" / "layernorm_f16.yaml"), "ilp", hw)
    assert plan.solver.status == "OPTIMAL" and plan.solver.gap == 0.0


def test_the_largest_profile_numbers_still_price_every_plan(tmp_path):
    """At the largest value a profile may give, every total still fits a float."""
    from partitioner import load_graph, partition
    path = tmp_path / "p.yaml"
    path.write_text("base: h100\nhbm_pj_per_byte: 1.0e+15\nsram_pj_per_byte: 1.0e+15\ntensor_pj_per_flop: 1.0e+15\n"
                    "sources: {hbm_pj_per_byte: x, sram_pj_per_byte: x, tensor_pj_per_flop: x}\n")
    graph = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    for strategy in ("none", "greedy"):
        assert math.isfinite(partition(graph, strategy, str(path), objective="energy").cost.energy_uj)


def test_the_smallest_peaks_still_price_every_plan(tmp_path):
    """At the smallest peak a profile may give, every strategy prices a plan whose
    FLOP dominate, beside the largest bandwidth."""
    from partitioner import load_graph, partition
    path = tmp_path / "p.yaml"
    peaks = ("peak_fp32_tflops", "peak_fp64_tflops", "peak_fp16_tensor_tflops", "peak_bf16_tensor_tflops")
    path.write_text("base: h100\nhbm_bandwidth_gb_per_s: 1.0e+15\n" + "".join(f"{p}: 1.0e-6\n" for p in peaks)
                    + "sources: {" + ", ".join(f"{p}: x" for p in ("hbm_bandwidth_gb_per_s", *peaks)) + "}\n")
    graph = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    for strategy in ("none", "greedy", "xla", "tvm", "inductor"):
        cost = partition(graph, strategy, str(path)).cost
        assert math.isfinite(cost.modeled_time_us) and cost.modeled_time_us > 1e9  # 7.2e12 FLOP at 1e6 FLOP/s


def test_a_json_profile_is_read_as_json(tmp_path):
    """Python's json escapes an emoji as a surrogate pair, which YAML refuses: the
    profile was rejected as malformed YAML."""
    import json

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"base": "h100", "sm_count": 100, "sources": {"sm_count": "café 😀"}}))
    hw = load_hardware(str(path))
    assert hw.sm_count == 100 and hw.sources["sm_count"] == "café 😀"
    path.write_text('{"base": "h100", "base": "a100"}')
    with pytest.raises(HardwareError, match="p.json: hardware profile: malformed JSON: key 'base' appears twice"):
        load_hardware(str(path))


@pytest.mark.parametrize("change, problem", [
    ({"name": "mine", "hbm_pj_per_byte": 0.0004}, "not a whole number of femtojoules"),  # was 0 fJ: the energy objective lost HBM
    ({"hbm_bandwidth_gb_per_s": 100.0}, "a built-in profile's name"),  # still called h100
    ({"name": "mine", "smem_per_block_default_bytes": 10**6}, "is above smem_per_block_optin_bytes"),
    ({"name": ""}, "name: must not be empty"),
    ({"name": "mine", "sm_count": -1}, "sm_count: -1 is less than or equal to the minimum of 0"),
])
def test_a_profile_built_in_python_gets_a_files_checks(change, problem):
    """``dataclasses.replace(PROFILES["h100"], ...)`` given to partition skipped every check."""
    from partitioner import load_graph, partition

    hw = dataclasses.replace(PROFILES["h100"], **change)
    with pytest.raises(HardwareError, match=problem):
        partition(load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "greedy", hw)
