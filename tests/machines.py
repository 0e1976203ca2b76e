"""Simulated machines for the layout decision (``hardware.Machine``): what torch would report."""

from __future__ import annotations

from grpo_exp.hardware import Machine

GIB = 1024**3
CPU_ONLY = Machine("2.13.0+cpu", cuda_build=False, driver=False)
CPU_BUILD_WITH_DRIVER = Machine("2.13.0+cpu", cuda_build=False, driver=True)  # an NVIDIA box, the wrong wheel
CUDA_BUILD_NO_GPU = Machine("2.13.0+cu128", cuda_build=True, driver=False)
A100 = Machine("2.13.0+cu128", True, True, gpus=1, name="NVIDIA A100", capability=(8, 0), native_bf16=True)
# Issue 59's GPU: the default run's SDPA gradients went NaN there in bf16.
H200 = Machine("2.11.0+cu130", True, True, gpus=1, name="NVIDIA H200", capability=(9, 0), native_bf16=True)
H100_X4 = Machine("2.13.0+cu128", True, True, gpus=4, name="NVIDIA H100", capability=(9, 0), native_bf16=True)
T4 = Machine("2.13.0+cu128", True, True, gpus=1, name="Tesla T4", capability=(7, 5), native_bf16=False)
V100_X2 = Machine("2.13.0+cu128", True, True, gpus=2, name="Tesla V100", capability=(7, 0), native_bf16=False)
P100 = Machine("2.13.0+cu128", True, True, gpus=1, name="Tesla P100", capability=(6, 0), native_bf16=False)
MI300X = Machine(
    "2.13.0+rocm6.4", True, True, gpus=1, name="AMD Instinct MI300X", capability=(9, 4), native_bf16=True, rocm=True
)
# One 141 GB H200 as nvidia-smi and torch count it (143,771 MiB): 0.9 of it over the default job's
# planned 826 MiB gives the 156 jobs at a time issue 59 saw on one.
H200 = Machine(
    "2.13.0+cu128",
    True,
    True,
    gpus=1,
    name="NVIDIA H200",
    capability=(9, 0),
    native_bf16=True,
    memory_bytes=143_771 * 1024**2,
)
