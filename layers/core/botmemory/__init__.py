"""botmemory: structured memory for a Discord bot (observations, facts, episodes, recall)."""
