"""tidegauge: a terminal coding agent that manages its context window and shows it live."""

__version__ = "0.1.0"
