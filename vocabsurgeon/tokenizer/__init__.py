"""Tokenizer editing: the editor, one record per tokenizer family, contexts, chat templates."""
