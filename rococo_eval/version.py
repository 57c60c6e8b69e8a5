"""The package's version, in a module of its own at the bottom of the layers (every layer may read it).

Example:
    >>> __version__.count(".")
    2
"""

__version__ = "0.1.0"
