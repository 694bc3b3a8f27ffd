"""The bundled host bot: prompt assembly, the LLM tool loop, models, demo and console."""
