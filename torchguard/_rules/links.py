"""Where repair hints on every platform send users: official pages only (NVIDIA, PyTorch),
never DLL or shared-object download sites."""

from __future__ import annotations

DRIVERS_URL = "https://www.nvidia.com/drivers"
"""NVIDIA's driver downloads (Windows, Linux; a WSL2 host's driver is a Windows one)."""
INSTALL_TORCH_URL = "https://pytorch.org/get-started/locally/"
"""PyTorch's install selector: which command installs which build."""
