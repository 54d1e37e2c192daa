"""The loader model and its facts: which copy each import binds to, torch's own import
replayed, siblings and extensions, the facts and verdicts cache, the DLL directory plan."""
