"""The gateway dispatch types the relay forwards."""

# The dispatch types IngestFunction records; every other dispatch is counted and dropped.
FORWARDED_EVENTS: frozenset[str] = frozenset(
    {
        "MESSAGE_CREATE",
        "MESSAGE_UPDATE",
        "MESSAGE_DELETE",
        "MESSAGE_DELETE_BULK",
        "MESSAGE_REACTION_ADD",
        "MESSAGE_REACTION_REMOVE",
        "MESSAGE_REACTION_REMOVE_ALL",
        "MESSAGE_REACTION_REMOVE_EMOJI",
    }
)
