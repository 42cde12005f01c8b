"""Tools for developing equilibria (not shipped with the package)."""
