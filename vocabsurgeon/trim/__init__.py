"""`trim`: cut a checkpoint's vocabulary down to the tokens a corpus uses, on disk, streaming (see docs/trim.md)."""
