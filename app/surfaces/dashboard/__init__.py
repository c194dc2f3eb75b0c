"""The dashboard: the only package in app/ that imports textual.

``app`` (the App: layout, keys, commands), ``bridge`` (session events to widget
messages), ``launch`` (the session's thread and the CLI entry).
"""
