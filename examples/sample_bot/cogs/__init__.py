"""The sample bot's own extensions."""
