"""luakiq: enqueue jobs into luakiq (ordered background jobs on Redis) from
Python, byte for byte as `luakiq enqueue` does (README.md)."""
from .client import Client, LayoutError
from .contract import InputError, canonical

__version__ = "0.1.0"
__all__ = ["Client", "InputError", "LayoutError", "canonical"]
