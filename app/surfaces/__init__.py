"""Surfaces: what a person sees. Headless mode and the dashboard, both subscribers of a session."""
