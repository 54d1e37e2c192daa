"""The Windows machine described: its file tree, installed distributions, System32,
the running process (the only place that touches ctypes/winreg) and DLL directory registration."""
