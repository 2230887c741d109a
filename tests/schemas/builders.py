"""Re-export of the valid-argument builders, which live in :mod:`engram_hostkit.examples` so that
hosts can use them too. Import from there; this module only keeps the old path working."""

from engram_hostkit.examples import *  # noqa: F401,F403
from engram_hostkit.examples import __all__  # noqa: F401
