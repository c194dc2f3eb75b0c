"""One agent: the loop (model call, tools, repeat), sub-agents, and the permission rules it asks."""
