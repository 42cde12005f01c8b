"""Deprecated: the old name of :mod:`equilibria.tasks.named_splits` (the training and evaluation splits of a task by
name), kept for one release; import from there (or from :mod:`equilibria.tasks`)."""

import warnings

from .named_splits import *  # noqa: F403
from .named_splits import __all__  # noqa: F401

warnings.warn(
    "equilibria.tasks.catalog is now equilibria.tasks.named_splits; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
