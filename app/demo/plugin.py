"""The demo as a provider plug-in: the scripted model, its workspace, its limits, its tool.

``app.providers.factory.PROVIDER_PLUGINS`` names ``DEMO_PLUGIN``; the runtime
applies what ``setup`` returns like any plug-in's, so no code outside
``app/demo/`` knows the demo exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.providers.plugin import ExtraTool, PluginContext, ProviderSetup


@dataclass(frozen=True)
class DemoPlugin:
    key_env: str = ""  # a scripted model needs no key

    def setup(self, context: PluginContext) -> ProviderSetup:
        # Imported here: choosing another provider never loads the demo.
        from app.demo.provider import DemoProvider
        from app.demo.tools import UntruncatedBashTool
        from app.demo.workspace import create_demo_workspace

        settings = context.settings
        workspace = create_demo_workspace(context.session_dir / "workspace",
                                          log_cache=context.data_dir / "demo-cache")
        # The scripted server enforces the window tidegauge is told, like a real one.
        window = settings.window or DemoProvider.DEFAULT_WINDOW
        provider = DemoProvider(speed=settings.demo_speed, window=window)
        return ProviderSetup(
            provider=provider,
            workspace=workspace,
            default_window=DemoProvider.DEFAULT_WINDOW,
            default_budget=DemoProvider.DEFAULT_BUDGET,
            # The flood's one call with the output limit off (see app/demo/tools.py).
            tools=[ExtraTool(UntruncatedBashTool(), max_output=0)],
        )


DEMO_PLUGIN = DemoPlugin()
