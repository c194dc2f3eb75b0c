"""Wiring: the command line, settings, and the assembly of a ready session; how processes end."""
