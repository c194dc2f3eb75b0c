"""The demo as a provider plug-in: the scripted model, its workspace, its limits, its tool.

``app.providers.factory.PROVIDER_PLUGINS`` names ``DEMO_PLUGIN``; the runtime
applies what ``setup`` returns like any plug-in's, so no code outside
``app/demo/`` knows the demo exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.providers.plugin import ExtraTool, PluginContext, PluginOption, ProviderSetup

SPEED = PluginOption("demo_speed", 40.0, minimum=0, metavar="TOKENS_PER_S",
                     help="demo provider: typing speed in tokens per second (default 40; 0: no delay)")


@dataclass(frozen=True)
class DemoPlugin:
    key_env: str = ""  # a scripted model needs no key: with no key set, the demo is chosen
    options: tuple[PluginOption, ...] = (SPEED,)

    def setup(self, context: PluginContext) -> ProviderSetup:
        # Imported here: choosing another provider never loads the demo.
        from app.demo.provider import DemoProvider
        from app.demo.tools import UntruncatedBashTool
        from app.demo.workspace import create_demo_workspace

        workspace = create_demo_workspace(context.session_dir / "workspace",
                                          log_cache=context.data_dir / "demo-cache")
        # The scripted server enforces the window tidegauge is told, like a real one.
        window = context.window or DemoProvider.DEFAULT_WINDOW
        provider = DemoProvider(speed=context.options[SPEED.name], window=window)
        return ProviderSetup(
            provider=provider,
            workspace=workspace,
            default_window=DemoProvider.DEFAULT_WINDOW,
            default_budget=DemoProvider.DEFAULT_BUDGET,
            price={"input": 0.0, "cached_input": 0.0, "cache_write": 0.0, "output": 0.0},  # scripted: free
            # The flood's one call with the output limit off (see app/demo/tools.py).
            tools=[ExtraTool(UntruncatedBashTool(), max_output=0)],
        )


DEMO_PLUGIN = DemoPlugin()
