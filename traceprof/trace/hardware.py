"""Peak FLOP/s and memory bandwidth of GPUs, by the device name in a trace's deviceProperties.

All figures are *dense* (without 2:4 structured sparsity) peaks at boost clock, per GPU, as the
vendors publish them; FLOP/s of the matrix units (tensor cores / matrix cores) for the
low-precision types, of the vector units for ``fp32`` and ``fp64`` where the vendor lists both.
Where a datasheet gives only the sparse figure, the dense one is half of it. Keys of
``flop_per_s``: ``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``, ``int8``; a type a
device has no peak for is absent (V100 has no bf16 or tf32 units).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

import msgspec
from msgspec.structs import force_setattr

T = 1e12


class DevicePeaks(msgspec.Struct, frozen=True):
    name: str  # the device model the figures are for
    pattern: str  # regular expression matched (case-insensitively) against the device name
    flop_per_s: Mapping[str, float]
    bytes_per_s: float
    source: str  # where the figures come from
    min_memory_bytes: int = 0  # the entry applies to devices with at least this much memory

    def __post_init__(self) -> None:
        force_setattr(self, "flop_per_s", MappingProxyType(dict(self.flop_per_s)))

    def matches(self, device_name: str, memory_bytes: int | None) -> bool:
        if not re.search(self.pattern, device_name, re.I):  # compiled once, by re's cache
            return False
        return memory_bytes is None or memory_bytes >= self.min_memory_bytes

    def peak(self, precision: str) -> float | None:
        return self.flop_per_s.get(precision)


# NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): FP64 9.7 TF, FP32 19.5 TF,
# TF32 156 TF, BF16/FP16 312 TF, INT8 624 TOPS (dense; 312/624/1248 with sparsity).
_A100 = {
    "fp64": 9.7 * T,
    "fp32": 19.5 * T,
    "tf32": 156.0 * T,
    "bf16": 312.0 * T,
    "fp16": 312.0 * T,
    "int8": 624.0 * T,
}
# NVIDIA H100 datasheet, SXM column: FP64 34 TF, FP32 67 TF, TF32 989 TF*, BF16/FP16 1979 TF*,
# FP8/INT8 3958* (* with sparsity; dense is half). The H200 SXM has the same compute.
_H100_SXM = {
    "fp64": 34.0 * T,
    "fp32": 67.0 * T,
    "tf32": 494.5 * T,
    "bf16": 989.5 * T,
    "fp16": 989.5 * T,
    "fp8": 1979.0 * T,
    "int8": 1979.0 * T,
}
# The H100 and H200 datasheets, NVL columns (the same compute): FP64 30 TF, FP32 60 TF,
# TF32 835 TF*, BF16/FP16 1671 TF*, FP8/INT8 3341* (* with sparsity; dense is half).
_NVL = {
    "fp64": 30.0 * T,
    "fp32": 60.0 * T,
    "tf32": 417.5 * T,
    "bf16": 835.5 * T,
    "fp16": 835.5 * T,
    "fp8": 1670.5 * T,
    "int8": 1670.5 * T,
}

# Order matters: the first entry whose pattern matches wins, so variants come before the
# generic entry of their family.
PEAKS: tuple[DevicePeaks, ...] = (
    # NVIDIA V100 datasheet ("NVIDIA Tesla V100 GPU Accelerator", 2018), PCIe column:
    # FP64 7 TF, FP32 14 TF, Tensor (fp16) 112 TF, 900 GB/s.
    DevicePeaks(
        "V100 PCIe",
        r"V100-PCIE|V100 PCIe",
        {"fp64": 7.0 * T, "fp32": 14.0 * T, "fp16": 112.0 * T},
        900e9,
        "NVIDIA Tesla V100 datasheet (PCIe)",
    ),
    # V100S datasheet: FP64 8.2 TF, FP32 16.4 TF, Tensor 130 TF, 1134 GB/s.
    DevicePeaks(
        "V100S PCIe",
        r"V100S",
        {"fp64": 8.2 * T, "fp32": 16.4 * T, "fp16": 130.0 * T},
        1134e9,
        "NVIDIA Tesla V100S datasheet",
    ),
    # V100 datasheet, SXM2 column (also DGX Station "DGXS" boards): FP64 7.8 TF,
    # FP32 15.7 TF, Tensor (fp16) 125 TF, 900 GB/s.
    DevicePeaks(
        "V100 SXM2",
        r"V100",
        {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125.0 * T},
        900e9,
        "NVIDIA Tesla V100 datasheet (SXM2)",
    ),
    # A100 (_A100 above); memory bandwidth from the same datasheet: 80GB SXM 2039 GB/s,
    # 80GB PCIe 1935 GB/s, 40GB 1555 GB/s.
    DevicePeaks(
        "A100 80GB PCIe",
        r"A100.*PCIe",
        _A100,
        1935e9,
        "NVIDIA A100 datasheet (80GB PCIe)",
        min_memory_bytes=60 << 30,
    ),
    DevicePeaks(
        "A100 80GB SXM", r"A100", _A100, 2039e9, "NVIDIA A100 datasheet (80GB SXM)", min_memory_bytes=60 << 30
    ),
    DevicePeaks("A100 40GB", r"A100", _A100, 1555e9, "NVIDIA A100 datasheet (40GB)"),
    # NVIDIA H100 datasheet (H100 PCIe column): FP64 26 TF, FP32 51 TF, TF32 756 TF*,
    # BF16/FP16 1513 TF*, FP8/INT8 3026*; 2.0 TB/s. (* with sparsity: dense is half)
    DevicePeaks(
        "H100 PCIe",
        r"H100.*PCIe",
        {
            "fp64": 26.0 * T,
            "fp32": 51.0 * T,
            "tf32": 378.0 * T,
            "bf16": 756.5 * T,
            "fp16": 756.5 * T,
            "fp8": 1513.0 * T,
            "int8": 1513.0 * T,
        },
        2.0e12,
        "NVIDIA H100 datasheet (PCIe)",
    ),
    # H100 datasheet (H100 NVL column): FP64 30 TF, FP32 60 TF, TF32 835 TF*, BF16/FP16
    # 1671 TF*, FP8/INT8 3341*; 3.9 TB/s.
    DevicePeaks(
        "H100 NVL",
        r"H100.*NVL",
        _NVL,
        3.9e12,
        "NVIDIA H100 datasheet (NVL)",
    ),
    # H100 SXM ("NVIDIA H100 80GB HBM3"): _H100_SXM above; 3.35 TB/s (H100 datasheet).
    DevicePeaks("H100 SXM", r"H100", _H100_SXM, 3.35e12, "NVIDIA H100 datasheet (SXM)"),
    # NVIDIA H200 datasheet, NVL column: FP64 30 TF, FP32 60 TF, TF32 835 TF*, BF16/FP16
    # 1671 TF*, FP8/INT8 3341*; 4.8 TB/s.
    DevicePeaks(
        "H200 NVL",
        r"H200.*NVL",
        _NVL,
        4.8e12,
        "NVIDIA H200 datasheet (NVL)",
    ),
    # H200 datasheet, SXM column: the H100 SXM's compute (TF32 989*, BF16 1979*, FP8 3958*)
    # with 141 GB of HBM3e at 4.8 TB/s.
    DevicePeaks("H200 SXM", r"H200", _H100_SXM, 4.8e12, "NVIDIA H200 datasheet (SXM)"),
    # NVIDIA HGX B200 specifications (8 GPUs: FP8 72 PF*, BF16/FP16 36 PF*, TF32 18 PF*,
    # INT8 72 POPS*, FP64 296 TF, 64 TB/s), divided by 8 and halved for sparsity:
    # per GPU FP64 37 TF, TF32 1.125 PF, BF16/FP16 2.25 PF, FP8/INT8 4.5 PF; 8 TB/s.
    DevicePeaks(
        "B200",
        r"B200",
        {
            "fp64": 37.0 * T,
            "tf32": 1125.0 * T,
            "bf16": 2250.0 * T,
            "fp16": 2250.0 * T,
            "fp8": 4500.0 * T,
            "int8": 4500.0 * T,
        },
        8.0e12,
        "NVIDIA HGX B200 specifications (per GPU)",
    ),
    # AMD Instinct MI250X datasheet: FP64 vector 47.9 TF, FP32 vector 47.9 TF (matrix 95.7),
    # FP16/BF16 383 TF, INT8 383 TOPS; 3.2 TB/s (3276.8 GB/s).
    DevicePeaks(
        "MI250X",
        r"MI250X",
        {"fp64": 47.9 * T, "fp32": 47.9 * T, "bf16": 383.0 * T, "fp16": 383.0 * T, "int8": 383.0 * T},
        3.2768e12,
        "AMD Instinct MI250X datasheet",
    ),
    # AMD Instinct MI250 datasheet: FP64/FP32 vector 45.3 TF, FP16/BF16 362.1 TF,
    # INT8 362.1 TOPS; 3.2 TB/s.
    DevicePeaks(
        "MI250",
        r"MI250(?!X)",
        {"fp64": 45.3 * T, "fp32": 45.3 * T, "bf16": 362.1 * T, "fp16": 362.1 * T, "int8": 362.1 * T},
        3.2768e12,
        "AMD Instinct MI250 datasheet",
    ),
    # AMD Instinct MI300X datasheet: FP64 vector 81.7 TF, FP32 163.4 TF, TF32 653.7 TF,
    # FP16/BF16 1307.4 TF, FP8/INT8 2614.9 (dense); 5.3 TB/s.
    DevicePeaks(
        "MI300X",
        r"MI300X",
        {
            "fp64": 81.7 * T,
            "fp32": 163.4 * T,
            "tf32": 653.7 * T,
            "bf16": 1307.4 * T,
            "fp16": 1307.4 * T,
            "fp8": 2614.9 * T,
            "int8": 2614.9 * T,
        },
        5.3e12,
        "AMD Instinct MI300X datasheet",
    ),
)

#: canonical op dtype -> the peak it runs at
PRECISION_OF_DTYPE: dict[str, str] = {
    "fp64": "fp64",
    "fp32": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "int8": "int8",
    "uint8": "int8",
    "complex64": "fp32",
    "complex128": "fp64",
}


def find_peaks(device_name: str, memory_bytes: int | None = None) -> DevicePeaks | None:
    """The peaks entry for a device name from deviceProperties (None when unknown)."""
    if not device_name:
        return None
    for entry in PEAKS:
        if entry.matches(device_name, memory_bytes):
            return entry
    return None
