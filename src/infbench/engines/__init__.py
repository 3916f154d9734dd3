"""Engines and servers: the engine settings every engine is measured with, vLLM's OpenAI-compatible
server, an external endpoint, and the server's /metrics.
"""
