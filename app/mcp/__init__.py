"""MCP servers as tools: one connection per server (client.py), all of a session's (hub.py).

Nothing here imports the MCP SDK at import time except client.py: settings
(settings.py) must stay cheap to load, the dashboard paints before them.
"""
