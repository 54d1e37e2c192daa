"""The one error a damaged image raises, shared by the header and the symbol readers."""


class PEReadError(Exception):
    """A file that the Windows loader would reject as an image (WinError 193)."""
