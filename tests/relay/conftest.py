"""discord.py imports `audioop` for voice, which the relay never uses; Python 3.11 and 3.12
warn that it is deprecated. Imported once here, quietly, before any test module loads it."""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord  # noqa: F401
