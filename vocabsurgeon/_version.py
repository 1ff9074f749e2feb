"""The version of vocabsurgeon, in a module of its own so that any module can read it without importing the package face."""

__version__ = "0.1.0"
