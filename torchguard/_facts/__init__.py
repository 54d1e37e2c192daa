"""Facts every platform shares, as data with their sources: GPU compute capabilities and the
CUDA versions that compile them, CUDA's minimum drivers, torch's releases and their CUDA
variants. Imports nothing of torchguard but the vocabulary, so both platforms' rooms can read
them without importing each other."""
