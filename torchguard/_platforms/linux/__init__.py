"""The Linux machine described: ld.so's cache, the process's mapped objects, the NVIDIA
driver and WSL, each read by a small pure parser that takes text or bytes (tests feed data)
plus a thin function reading the real file. Nothing here spawns a process."""
