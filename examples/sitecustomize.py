"""Protect every `import torch` of an environment: put this file on sys.path as sitecustomize.

Python imports `sitecustomize` at start-up (copy this file into site-packages, or merge these
lines into an existing sitecustomize.py). The alternative needs no file of yours:
`torchguard hook install` writes a one-line .pth (and a PEP 829 .start file for Python 3.15+).

TORCHGUARD=strict (default) makes a broken install raise torchguard.TorchDllError at
`import torch`; TORCHGUARD=warn prints the diagnosis and lets the import proceed;
TORCHGUARD=off disables the hook. TORCHGUARD_REPORT=FILE writes the JSON report of each run.
"""

try:
    import torchguard._boot
except ImportError:  # torchguard was uninstalled: start Python normally
    pass
else:
    torchguard._boot.activate()
