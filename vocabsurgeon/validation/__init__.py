"""Validation: which checks run on a written checkpoint, what they compute, the report."""
