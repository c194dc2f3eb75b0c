"""The kernel: the vocabulary every layer shares and nothing else.

Messages, events and their words, commands, the surface Protocol, usage, errors, markers,
and the low-level guards (sanitize, redact, private files). Imports nothing else from app/.
"""
