"""vocabsurgeon: add new tokens to a Hugging Face checkpoint on disk, streaming, safe and validated.

Example:
    >>> from vocabsurgeon import add_tokens, read_tokens_file
    >>> result = add_tokens("ckpt/", "out/", read_tokens_file("lotr.txt"), init="mean")  # doctest: +SKIP
"""

__version__ = "0.1.0"

from .errors import InputError, OutputExistsError, PushError, ValidationFailed, VocabSurgeonError, WriteError  # noqa: E402
from .hub import PushResult, push, resolve_checkpoint  # noqa: E402
from .modelcard import model_card, write_model_card  # noqa: E402
from .init import STRATEGIES, kl_bound  # noqa: E402
from .surgery import AddOptions, AddResult, Plan, add_tokens, apply, plan_add  # noqa: E402
from .tokenizer import read_tokens_file  # noqa: E402

__all__ = [
    "__version__", "add_tokens", "plan_add", "apply", "AddOptions", "AddResult", "Plan", "read_tokens_file",
    "STRATEGIES", "kl_bound", "VocabSurgeonError", "InputError", "OutputExistsError", "ValidationFailed",
    "PushError", "WriteError", "push", "PushResult", "resolve_checkpoint", "model_card", "write_model_card",
]
