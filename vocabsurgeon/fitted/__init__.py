"""Fitted init: new rows fitted to what the model predicts and reads in context."""
