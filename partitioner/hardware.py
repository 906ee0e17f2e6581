"""Hardware profiles: the constants of the cost model, each with its source.

Built-in profiles: ``h100`` (H100 SXM5 80 GB), ``h200`` (H200 SXM 141 GB) and
``a100`` (A100 SXM4 80 GB). A user profile is a YAML file with the same keys
(``docs/cost-model.md`` shows one); ``base: h100`` takes every key it does not
give from a built-in profile.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from fractions import Fraction
from pathlib import Path

import jsonschema
import yaml

from .errors import HardwareError
from .schema import validator
from .yamlio import parse_document, parse_error_message, read_error_message, read_text

_DATASHEET_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column)"
_DATASHEET_H200 = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column)"
_DATASHEET_A100 = "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column)"
_WHITEPAPER_H100 = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: 132 SMs)"
_WHITEPAPER_A100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (A100: 108 SMs)"
_GUIDE_CC90 = "CUDA C++ Programming Guide, Technical Specifications per Compute Capability, CC 9.0"
_GUIDE_CC80 = "CUDA C++ Programming Guide, Technical Specifications per Compute Capability, CC 8.0"
_GUIDE_PARAMS = "CUDA C++ Programming Guide, Function Parameters: 32,764 bytes since CUDA 12.1 (Volta and newer)"
_XLA_LAUNCH = "XLA GPU performance model, kKernelLaunchOverhead (xla/service/gpu/model/gpu_performance_model_base.h)"
_DENSE = " (dense: half the datasheet's with-sparsity figure)"
_HOROWITZ = ("estimate: M. Horowitz, 'Computing's energy problem', ISSCC 2014, energies at 45 nm "
             "(upper estimates for a 4-7 nm GPU); ")
ENERGY_SOURCES = {
    "hbm_pj_per_byte": "estimate: 3.9 pJ/bit for HBM2 (M. O'Connor et al., 'Fine-Grained DRAM', MICRO 2017) "
                       "x 8 bits",
    "sram_pj_per_byte": _HOROWITZ + "an 8 KB SRAM read of 64 bits, 10 pJ, per byte",
    "fp32_pj_per_flop": _HOROWITZ + "a float32 add (0.9 pJ) and multiply (3.7 pJ), per FLOP of the pair",
    "fp64_pj_per_flop": "estimate: twice the float32 figure (a 53-bit multiplier array against a 24-bit one)",
    "tensor_pj_per_flop": _HOROWITZ + "a float16 add (0.4 pJ) and multiply (1.1 pJ), per FLOP of the pair",
}
LAUNCH_BYTES_DENOMINATOR = 1000


@dataclass(frozen=True)
class Hardware:
    """One GPU's cost-model constants. Units are in the field names.

    Attributes:
        name: profile name.
        hbm_bandwidth_gb_per_s: peak HBM bandwidth, 1e9 bytes/s.
        peak_fp32_tflops / peak_fp64_tflops: CUDA-core peak, 1e12 FLOP/s.
        peak_fp16_tensor_tflops / peak_bf16_tensor_tflops: dense tensor-core peak, 1e12 FLOP/s.
        sm_count: streaming multiprocessors.
        smem_per_block_default_bytes / smem_per_block_optin_bytes: shared memory one
            block may use without / with the opt-in attribute.
        smem_per_sm_bytes: shared memory per SM.
        registers_per_thread / registers_per_sm: 32-bit registers.
        kernel_param_bytes: kernel-parameter space.
        launch_overhead_us: modelled cost of one kernel launch, microseconds.
        hbm_pj_per_byte / sram_pj_per_byte: energy of moving a byte between HBM and
            the chip / out of registers or shared memory, picojoules (estimates).
        fp32_pj_per_flop / fp64_pj_per_flop / tensor_pj_per_flop: energy of one FLOP
            on the CUDA cores / in float64 / on tensor cores, picojoules (estimates).
        sources: field name -> where the number comes from.
    """

    name: str
    hbm_bandwidth_gb_per_s: float
    peak_fp32_tflops: float
    peak_fp64_tflops: float
    peak_fp16_tensor_tflops: float
    peak_bf16_tensor_tflops: float
    sm_count: int
    smem_per_block_default_bytes: int
    smem_per_block_optin_bytes: int
    smem_per_sm_bytes: int
    registers_per_thread: int
    registers_per_sm: int
    kernel_param_bytes: int
    launch_overhead_us: float
    hbm_pj_per_byte: float = 31.2
    sram_pj_per_byte: float = 1.25
    fp32_pj_per_flop: float = 2.3
    fp64_pj_per_flop: float = 4.6
    tensor_pj_per_flop: float = 0.75
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        # the energies are estimates every profile shares unless it gives its own
        object.__setattr__(self, "sources", {**ENERGY_SOURCES, **self.sources})

    @property
    def bandwidth(self) -> float:
        """HBM bandwidth in bytes/s."""
        return self.hbm_bandwidth_gb_per_s * 1e9

    @property
    def launch_overhead(self) -> float:
        """Launch overhead in seconds."""
        return self.launch_overhead_us * 1e-6

    @property
    def launch_bytes(self) -> Fraction:
        """Launch overhead expressed in bytes of HBM traffic: launch x bandwidth.

        The ILP minimises ``launches * launch_bytes + bytes`` in integers; this is the
        modelled time multiplied by the bandwidth, so the optimum is the same plan. It
        is exact for profiles whose product has at most three decimals (all built-in
        ones); otherwise it is rounded to 1/1000 byte, which keeps the integers small.
        """
        return _launch_bytes(self)

    @property
    def time_units_per_s(self) -> int:
        """Units of the ILP's integer time per second: bandwidth times the launch
        bytes' denominator, so that a byte and a launch are whole units."""
        return _time_units_per_s(self)

    def flop_units(self, dtype: str, contraction: bool) -> Fraction:
        """Integer-time units (:attr:`time_units_per_s`) one FLOP takes at the peak of
        its unit, exactly (the profile's decimal figures as fractions)."""
        return _flop_units(self, dtype, contraction)

    @property
    def hbm_energy_fj(self) -> int:
        """Femtojoules per HBM byte (the profile's picojoules, to the femtojoule)."""
        return _femtojoules(self.hbm_pj_per_byte)

    @property
    def sram_energy_fj(self) -> int:
        """Femtojoules per on-chip byte."""
        return _femtojoules(self.sram_pj_per_byte)

    def flop_energy_fj(self, dtype: str, contraction: bool) -> int:
        """Femtojoules per FLOP on the unit an op computing in ``dtype`` runs on."""
        if contraction and dtype in ("float16", "bfloat16"):
            return _femtojoules(self.tensor_pj_per_flop)
        return _femtojoules(self.fp64_pj_per_flop if dtype == "float64" else self.fp32_pj_per_flop)

    def peak_flops(self, dtype: str, contraction: bool) -> float:
        """Peak FLOP/s for an op computing in ``dtype``: tensor cores for half-precision
        contractions, CUDA cores otherwise (elementwise math runs in float32)."""
        return float(_peak_tflops(self, dtype, contraction)) * 1e12

    def to_dict(self) -> dict:
        return asdict(self)


# The ILP prices every candidate group with these; exact fractions are slow to
# build, and a frozen profile's are constant, so each is computed once per profile.
@functools.cache
def _launch_bytes(hw: Hardware) -> Fraction:
    exact = Fraction(str(hw.launch_overhead_us)) * Fraction(str(hw.hbm_bandwidth_gb_per_s)) * 1000
    return exact if exact.denominator <= LAUNCH_BYTES_DENOMINATOR else Fraction(
        round(exact * LAUNCH_BYTES_DENOMINATOR), LAUNCH_BYTES_DENOMINATOR)


@functools.cache
def _time_units_per_s(hw: Hardware) -> int:
    return int(Fraction(str(hw.hbm_bandwidth_gb_per_s)) * 10**9 * _launch_bytes(hw).denominator)


@functools.cache
def _flop_units(hw: Hardware, dtype: str, contraction: bool) -> Fraction:
    return Fraction(_time_units_per_s(hw)) / (_peak_tflops(hw, dtype, contraction) * 10**12)


def _peak_tflops(hw: Hardware, dtype: str, contraction: bool) -> Fraction:
    """The peak, in TFLOP/s, of the unit an op computing in ``dtype`` runs on, as an
    exact fraction of the profile's decimal figure."""
    if contraction and dtype == "float16":
        value = hw.peak_fp16_tensor_tflops
    elif contraction and dtype == "bfloat16":
        value = hw.peak_bf16_tensor_tflops
    elif dtype == "float64":
        value = hw.peak_fp64_tflops
    else:
        value = hw.peak_fp32_tflops
    return Fraction(str(value))


def _femtojoules(picojoules: float) -> int:
    """``picojoules`` in whole femtojoules (exact: a profile's figures have at most
    three decimals, :func:`_check_femtojoules`)."""
    return round(Fraction(str(picojoules)) * 1000)


def _hopper(name: str, bandwidth: float, datasheet: str) -> Hardware:
    return Hardware(
        name=name,
        hbm_bandwidth_gb_per_s=bandwidth,
        peak_fp32_tflops=67.0,
        peak_fp64_tflops=34.0,
        peak_fp16_tensor_tflops=989.5,
        peak_bf16_tensor_tflops=989.5,
        sm_count=132,
        smem_per_block_default_bytes=48 * 1024,
        smem_per_block_optin_bytes=227 * 1024,
        smem_per_sm_bytes=228 * 1024,
        registers_per_thread=255,
        registers_per_sm=65536,
        kernel_param_bytes=32764,
        launch_overhead_us=1.0,
        sources={
            "hbm_bandwidth_gb_per_s": datasheet,
            "peak_fp32_tflops": datasheet,
            "peak_fp64_tflops": datasheet,
            "peak_fp16_tensor_tflops": datasheet + _DENSE,
            "peak_bf16_tensor_tflops": datasheet + _DENSE,
            "sm_count": _WHITEPAPER_H100,
            "smem_per_block_default_bytes": _GUIDE_CC90,
            "smem_per_block_optin_bytes": _GUIDE_CC90,
            "smem_per_sm_bytes": _GUIDE_CC90,
            "registers_per_thread": _GUIDE_CC90,
            "registers_per_sm": _GUIDE_CC90,
            "kernel_param_bytes": _GUIDE_PARAMS,
            "launch_overhead_us": _XLA_LAUNCH,
        },
    )


PROFILES: dict[str, Hardware] = {
    "h100": _hopper("h100", 3350.0, _DATASHEET_H100),
    "h200": _hopper("h200", 4800.0, _DATASHEET_H200),
    "a100": Hardware(
        name="a100",
        hbm_bandwidth_gb_per_s=2039.0,
        peak_fp32_tflops=19.5,
        peak_fp64_tflops=9.7,
        peak_fp16_tensor_tflops=312.0,
        peak_bf16_tensor_tflops=312.0,
        sm_count=108,
        smem_per_block_default_bytes=48 * 1024,
        smem_per_block_optin_bytes=163 * 1024,
        smem_per_sm_bytes=164 * 1024,
        registers_per_thread=255,
        registers_per_sm=65536,
        kernel_param_bytes=32764,
        launch_overhead_us=1.0,
        sources={
            "hbm_bandwidth_gb_per_s": _DATASHEET_A100,
            "peak_fp32_tflops": _DATASHEET_A100,
            "peak_fp64_tflops": _DATASHEET_A100,
            "peak_fp16_tensor_tflops": _DATASHEET_A100 + " (dense)",
            "peak_bf16_tensor_tflops": _DATASHEET_A100 + " (dense)",
            "sm_count": _WHITEPAPER_A100,
            "smem_per_block_default_bytes": _GUIDE_CC80,
            "smem_per_block_optin_bytes": _GUIDE_CC80,
            "smem_per_sm_bytes": _GUIDE_CC80,
            "registers_per_thread": _GUIDE_CC80,
            "registers_per_sm": _GUIDE_CC80,
            "kernel_param_bytes": _GUIDE_PARAMS,
            "launch_overhead_us": _XLA_LAUNCH,
        },
    ),
}

_NUMBER_FIELDS = [f.name for f in fields(Hardware) if f.name not in ("name", "sources")]
# the energies have shared defaults (ENERGY_SOURCES); every other number must be given
_REQUIRED_FIELDS = [f.name for f in fields(Hardware) if f.name in _NUMBER_FIELDS and f.default is MISSING]
_INTEGER_FIELDS = [f.name for f in fields(Hardware) if f.type == "int"]
#: The largest number a profile may give: every modelled total of a graph (bytes, FLOP
#: and energies times these) then fits a float, while no GPU comes near it (1e15 GB/s,
#: TFLOP/s, pJ or us).
MAX_PROFILE_VALUE = 1e15
#: The smallest peak (TFLOP/s) a profile may give, a million FLOP/s: a smaller one
#: (5e-324) made a FLOP cost more time units than a float holds, and no GPU is near it.
MIN_PEAK_TFLOPS = 1e-6
_PROFILE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": r"\S"},
        "base": {"enum": sorted(PROFILES)},
        "sources": {"type": "object", "additionalProperties": {"type": "string", "pattern": r"\S"},
                    "propertyNames": {"enum": _NUMBER_FIELDS}},
        **{key: {"type": "integer" if key in _INTEGER_FIELDS else "number", "exclusiveMinimum": 0,
                 "maximum": MAX_PROFILE_VALUE, **({"minimum": MIN_PEAK_TFLOPS} if key.startswith("peak_") else {})}
           for key in _NUMBER_FIELDS},
    },
}


def load_hardware(spec: str | Hardware) -> Hardware:
    """A hardware profile: a built-in one by name, or one read from a YAML file.

    A file gives every numeric field of :class:`Hardware` (or ``base: NAME`` and the
    fields it changes) and, per field it gives, a ``sources`` entry saying where the
    number comes from (``docs/cost-model.md``).

    Parameters
    ----------
    spec : str, os.PathLike or Hardware
        ``h100``, ``h200`` or ``a100`` (any case), a ``.yaml``/``.yml``/``.json``
        path, or a :class:`Hardware`, returned as it is once it passes a file's
        checks (sources aside).

    Returns
    -------
    Hardware
        Bandwidth in bytes/s, launch overhead in seconds, budgets in bytes and
        registers, and the source of each number in ``hardware.sources``.

    Raises
    ------
    HardwareError
        An unknown name; an unreadable or malformed file; a missing field or source;
        a ``spec`` of another type.

    Examples
    --------
    >>> hw = load_hardware("H100")
    >>> hw.name, hw.bandwidth, hw.launch_overhead
    ('h100', 3350000000000.0, 1e-06)
    >>> hw.sources["hbm_bandwidth_gb_per_s"]
    'NVIDIA H100 Tensor Core GPU datasheet (SXM5 column)'
    >>> load_hardware("h300")
    Traceback (most recent call last):
    ...
    partitioner.errors.HardwareError: unknown hardware 'h300': use one of h100, h200, a100 or a .yaml profile
    """
    if isinstance(spec, Hardware):
        return _checked(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise HardwareError(f"hardware must be a profile name, a profile file or a Hardware, got {spec!r}")
    spec = os.fspath(spec)
    if spec.lower() in PROFILES:
        return PROFILES[spec.lower()]
    path = Path(spec)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise HardwareError(f"unknown hardware {spec!r}: use one of {', '.join(PROFILES)} or a .yaml profile")
    try:
        data = parse_document(read_text(path), path.suffix)
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareError(f"{spec}: hardware profile: {read_error_message(exc)}") from None
    except (ValueError, yaml.YAMLError) as exc:  # (a .json profile is read as JSON: YAML rejects some escapes)
        raise HardwareError(f"{spec}: hardware profile: {parse_error_message(exc)}") from None
    except RecursionError:
        raise HardwareError(f"{spec}: the file nests too deeply to be a hardware profile") from None
    if not isinstance(data, dict):
        raise HardwareError(f"{spec}: a hardware profile is a mapping of field: value")
    if "ops" in data:  # a graph given where a profile belongs (its schema error would name only its keys)
        raise HardwareError(f"{spec}: this is an operator graph, not a hardware profile: use one of "
                            f"{', '.join(PROFILES)} or a profile file (docs/cost-model.md)")
    _check_schema(spec, data)
    base = PROFILES[data["base"]].to_dict() if "base" in data else {}
    given = {k: v for k, v in data.items() if k in _NUMBER_FIELDS}
    missing = [k for k in _REQUIRED_FIELDS if k not in given and k not in base]
    if missing:
        raise HardwareError(f"{spec}: missing field {', '.join(missing)}")
    unsourced = [k for k in given if k not in data.get("sources", {})]
    if unsourced:
        raise HardwareError(f"{spec}: give a source for {', '.join(unsourced)} under 'sources'")
    values = {**base, **given, "name": data.get("name", path.stem)}
    values["sources"] = {**base.get("sources", {}), **data.get("sources", {})}
    _check_values(spec, values)
    return Hardware(**values)


@functools.cache
def _checked(hw: Hardware) -> Hardware:
    """``hw`` after the checks a profile file gets but its sources (one built in
    Python, ``dataclasses.replace(PROFILES["h100"], ...)``, skipped them all);
    once per profile, as legality takes profiles too."""
    label = f"hardware profile {hw.name!r}"
    _check_schema(label, {k: v for k, v in hw.to_dict().items() if k != "sources"})
    _check_values(label, hw.to_dict())
    return hw


def _check_schema(spec: str, data: dict) -> None:
    """The profile schema: known fields, numbers positive, finite and in range,
    counts integers, names and sources not empty."""
    bad = [k for k in _NUMBER_FIELDS if isinstance(data.get(k), float) and not math.isfinite(data[k])]
    if bad:  # before the schema, which would call an infinity too large
        raise HardwareError(f"{spec}: {', '.join(bad)} must be a finite number")
    error = jsonschema.exceptions.best_match(validator(_PROFILE_SCHEMA).iter_errors(data))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        problem = "must not be empty" if error.validator == "pattern" else error.message  # (the pattern is \S)
        raise HardwareError(f"{spec}: {where + ': ' if where else ''}{problem}")


def _check_values(spec: str, values: dict) -> None:
    """The rules between a whole profile's numbers (``values``: every field)."""
    builtin = PROFILES.get(values["name"].strip().lower())
    if builtin is not None and any(values[k] != getattr(builtin, k) for k in _NUMBER_FIELDS):
        raise HardwareError(f"{spec}: the profile is named {values['name']!r}, a built-in profile's name, but "
                            f"changes its numbers: give it a name of its own (name: ...)")
    _check_integer_time(spec, values["hbm_bandwidth_gb_per_s"], values["launch_overhead_us"])
    _check_femtojoules(spec, values)
    _check_budgets(spec, values)


def _check_femtojoules(spec: str, values: dict) -> None:
    """The energy objective counts whole femtojoules (:func:`_femtojoules`): an energy
    of a fraction of one would be rounded silently (0.0004 pJ a byte to none)."""
    for key in ENERGY_SOURCES:  # (a file without them takes the estimates, whole femtojoules)
        if key in values and (Fraction(str(values[key])) * 1000).denominator != 1:
            raise HardwareError(f"{spec}: {key} {values[key]} is not a whole number of femtojoules (0.001 pJ): "
                                f"give at most three decimals")


#: Budgets each no larger than the next: a block's shared memory by default, with
#: the opt-in, and an SM's; a thread's registers and an SM's (CUDA C++ Programming
#: Guide, Technical Specifications per Compute Capability: every GPU's table holds these).
_BUDGET_ORDER = [("smem_per_block_default_bytes", "smem_per_block_optin_bytes"),
                 ("smem_per_block_optin_bytes", "smem_per_sm_bytes"),
                 ("registers_per_thread", "registers_per_sm")]


def _check_budgets(spec: str, values: dict) -> None:
    """Refuse budgets no GPU has, one above what holds it: a plan checked against
    them would be checked against neither."""
    for small, large in _BUDGET_ORDER:
        if values[small] > values[large]:
            raise HardwareError(f"{spec}: {small} {values[small]} is above {large} {values[large]}, "
                                f"which holds it")


def _check_integer_time(spec: str, bandwidth_gb_per_s: float, launch_overhead_us: float) -> None:
    """The ILP's integer time counts HBM bytes, each a whole number of units, and a
    launch as bytes to a thousandth (``LAUNCH_BYTES_DENOMINATOR``): a profile below one
    byte per second, or whose launch takes less than one byte's time, has no such
    units (a launch would round to nothing, below its own share of the roofline)."""
    if Fraction(str(bandwidth_gb_per_s)) * 10**9 < 1:
        raise HardwareError(f"{spec}: hbm_bandwidth_gb_per_s {bandwidth_gb_per_s} is under one byte per second "
                            f"(1e-9 GB/s), which the integer time model cannot count")
    launch_bytes = Fraction(str(launch_overhead_us)) * Fraction(str(bandwidth_gb_per_s)) * 1000
    if 0 < launch_bytes < 1:
        raise HardwareError(f"{spec}: a launch (launch_overhead_us {launch_overhead_us} at hbm_bandwidth_gb_per_s "
                            f"{bandwidth_gb_per_s}) takes {float(launch_bytes):.3g} bytes' time, under one byte: "
                            f"the integer time model cannot count it")
