"""Small Discord helpers shared by the cogs: turn contexts, checks, text formatting."""
