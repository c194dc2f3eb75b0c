"""The session: commands in, ordered events out; its transcript, lock, and its own process."""
