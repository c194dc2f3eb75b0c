"""Wiring: the command line, settings, the assembly of a ready session (in this process or the
session process's, `session_child`)."""
