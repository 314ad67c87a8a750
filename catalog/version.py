"""The catmap version (also part of the on-disk cache key)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
