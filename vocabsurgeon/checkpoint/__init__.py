"""Checkpoint files: reading (strict headers, index), writing, the architecture table, the Hub."""
