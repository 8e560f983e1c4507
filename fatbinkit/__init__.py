"""fatbinkit: GPU kernel binaries (fatbin, cubin, PTX) built, embedded, inspected, loaded."""

from .arch import Arch
from .errors import FatbinkitError

__all__ = ["Arch", "FatbinkitError"]
__version__ = "0.1.0"
