"""Time as the bot tells it: a server's time zone (`/memory-staff timezone`, UTC otherwise),
dates and times written in it, relative dates resolved against the day they were said, and
the sane windows a date drawn from a message must lie in.

One zone for every date of one prompt: the memory model's batch, the memory block and the
answer prompt each name it once and write every date in it.
"""
