"""The GPUs of issue 23's done-when line and their SM architecture (NVIDIA's CUDA GPU list):
one table for the tests that judge torch builds against them (test_gpu_matrix, test_gpu_pick)."""

from __future__ import annotations

GPUS = {
    "NVIDIA GeForce GTX 970": 52,
    "NVIDIA GeForce GTX 1080": 61,
    "Tesla V100-SXM2-16GB": 70,
    "NVIDIA GeForce RTX 2080": 75,
    "NVIDIA GeForce RTX 3090": 86,
    "NVIDIA GeForce RTX 4090": 89,
    "NVIDIA H100 80GB HBM3": 90,
    "NVIDIA GeForce RTX 5090": 120,
}
