"""The operating system's side of tidegauge's own processes: whole process trees
(``proctree``), ending a process without interpreter teardown (``process_exit``) and headless
mode's watchdog (``watchdog``, started as a file).

The lowest layer beside ``kernel``: imports nothing else from app/, so every layer (a tool, an
MCP server's start, a surface's exit path, the session process) may use it.
"""
