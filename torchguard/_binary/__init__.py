"""Binary formats: what a file says, read with ``struct`` from bytes; no OS, no paths."""
