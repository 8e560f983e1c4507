"""fatbinkit: GPU kernel binaries (fatbin, cubin, PTX) built, embedded, inspected and loaded in-process."""

from .arch import Arch
from .errors import FatbinkitError

__all__ = ["Arch", "FatbinkitError"]
__version__ = "0.1.0"
