"""The gateway relay: holds Discord's gateway websocket and feeds IngestFunction.

`forwarder` (batching, sinks, spool) knows nothing of Discord; `gateway` is the
discord.py client that feeds it; `python -m relay` runs the two together.
"""
