"""The offline demo, as a provider plug-in (``plugin.DEMO_PLUGIN``).

- ``scenarios``: what the scripted model decides, from the request alone.
- ``provider``: the scripted model behind the Provider protocol (usage, pacing, its window).
- ``tools``: ``run_bash_untruncated``, the flood scenario's one call with the output limit off.
- ``workspace``: the scratch workspace, copied from ``project/`` (package data) plus a 15 MB log.
- ``plugin``: what the runtime gets: provider, workspace, default window/budget, the tool.
"""
