"""The package version: one place that hatch reads and every module imports from below the face."""

__version__ = "0.1.0"
