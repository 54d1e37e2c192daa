"""What code an NVIDIA GPU can run, as data shared by every platform.

A GPU's compute capability comes from its marketed name (a Windows display adapter's driver
description, a Linux ``/proc/driver/nvidia/gpus`` entry, or ``--gpu``), mapped with the table
below, transcribed from NVIDIA's "CUDA GPU Compute Capability" page
(developer.nvidia.com/cuda-gpus) and its legacy list. The CUDA versions that can compile each
architecture come from the CUDA toolkit release notes: CUDA 11.0 adds sm_80, 11.1 sm_86, 11.8
sm_89 and sm_90, 12.8 sm_100 and sm_120, 12.9 sm_103; CUDA 12.0 removes sm_35/sm_37, CUDA 13.0
removes Maxwell, Pascal and Volta (sm_50 to sm_72).
"""

from __future__ import annotations

import re

CUDA_GPUS_URL = "https://developer.nvidia.com/cuda-gpus"

Capability = tuple[int, int]

#: Marketed-name pattern -> compute capability; the first match wins, so specific names first.
CAPABILITY_BY_NAME: tuple[tuple[str, Capability], ...] = (
    (r"\bRTX \d{4} Ada\b|\bL40S?\b|\bL4\b|\bL20\b", (8, 9)),  # before "RTX 50x0"
    (r"\bQuadro RTX\b|\bTITAN RTX\b", (7, 5)),
    (r"\bGeForce RTX 50\d0\b|\bRTX PRO \d{4}\b.*Blackwell", (12, 0)),
    (r"\bGB?300\b", (10, 3)),
    (r"\bGB?200\b|\bB100\b", (10, 0)),
    (r"\bGH200\b|\bH100\b|\bH200\b|\bH800\b", (9, 0)),
    (r"\bGeForce RTX 40\d0\b", (8, 9)),
    (r"\bA100\b|\bA800\b|\bA30\b", (8, 0)),
    (r"\bGeForce RTX 30\d0\b|\bRTX A\d{3,4}\b|\bA10G?\b|\bA16\b|\bA2\b|\bA40\b", (8, 6)),
    (r"\bGeForce RTX 20\d0\b|\bGTX 16\d0\b|\bT4\b|\bT\d{3,4}\b|\bMX[45]50\b", (7, 5)),
    (r"\bTITAN V\b|\bV100\b|\bGV100\b", (7, 0)),
    (r"\bP100\b|\bGP100\b", (6, 0)),
    (r"\bGTX 10[5-8]0\b|\bTITAN Xp\b|\bTITAN X \(Pascal\)|\bQuadro P\d+|\bP40\b|\bP4\b", (6, 1)),
    (r"\bGTX 9[56]0M\b|\bGTX 75[0-9]\b|\bGTX 745\b", (5, 0)),
    (r"\bGTX 9[5-8]0\b|\bGTX 9[6-8][05]M\b|\bGTX TITAN X\b|\bQuadro M\d+|\bM40\b|\bM60\b", (5, 2)),
)

#: Architecture (major*10+minor) -> first CUDA (major, minor) that compiles it.
FIRST_CUDA: dict[int, tuple[int, int]] = {
    50: (6, 0),
    52: (6, 5),
    60: (8, 0),
    61: (8, 0),
    70: (9, 0),
    75: (10, 0),
    80: (11, 0),
    86: (11, 1),
    89: (11, 8),
    90: (11, 8),
    100: (12, 8),
    103: (12, 9),
    120: (12, 8),
}
#: Architectures at or below the key's value that a CUDA major release no longer compiles.
DROPPED_IN = ((12, 37), (13, 72))


def compute_capability(name: str) -> Capability | None:
    """The compute capability of an NVIDIA GPU from its name; None when not in the table."""
    for pattern, capability in CAPABILITY_BY_NAME:
        if re.search(pattern, name, re.IGNORECASE):
            return capability
    return None


def cuda_can_build(cuda: tuple[int, int], capability: Capability) -> bool:
    """Whether CUDA ``cuda`` can compile code for this architecture (SASS or PTX)."""
    arch = capability[0] * 10 + capability[1]
    first = FIRST_CUDA.get(arch)
    if first is None or cuda < first:
        return False
    return not any(cuda[0] >= major and arch <= last for major, last in DROPPED_IN)


__all__ = [
    "CAPABILITY_BY_NAME",
    "CUDA_GPUS_URL",
    "DROPPED_IN",
    "FIRST_CUDA",
    "Capability",
    "compute_capability",
    "cuda_can_build",
]
