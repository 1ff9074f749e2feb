"""vocabsurgeon: add new tokens to a Hugging Face checkpoint on disk, streaming, safe and validated.

Example:
    >>> from vocabsurgeon import add_tokens, read_tokens_file
    >>> result = add_tokens("ckpt/", "out/", read_tokens_file("lotr.txt"), init="mean")  # doctest: +SKIP
"""

from ._version import __version__
from .errors import (InputError, OutputExistsError, PushError, UnsupportedVersion, ValidationFailed, VocabSurgeonError,
                     WriteError)
from .checkpoint.hub import PushResult, push, resolve_checkpoint
from .engine.modelcard import model_card, write_model_card
from .init import STRATEGIES
from .kl import kl_bound
from .engine.target import AddOptions, Plan, open_target
from .engine.job import AddJob, AddResult, apply
from .add.plan import plan_add, plan_tokens
from .add.pipeline import add_tokens
from .explore.suggest import Suggestion, suggest_tokens
from .add.wordlist import read_tokens_file
from .engine.finish import PushOptions, ValidationOptions, finish_add
from .add.pipeline import add_validate_push
from .trim.surgery import TrimOptions, TrimPlan, TrimResult, plan_trim, trim_vocabulary

# The checks run models (torch, transformers): imported on first use, so that `import vocabsurgeon`
# and a plain `add` stay light. (`compare` is also the name of its module: import it from
# `vocabsurgeon.explore.compare`.)
_LAZY = {"inspect_checkpoint": "explore.inspection", "validate_checkpoint": "validation.validate", "neighbors": "explore.compare"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__", "add_tokens", "plan_add", "plan_tokens", "open_target", "apply", "AddJob", "AddOptions",
    "AddResult", "Plan", "read_tokens_file", "STRATEGIES", "kl_bound", "VocabSurgeonError", "InputError",
    "OutputExistsError", "UnsupportedVersion", "ValidationFailed", "PushError", "WriteError", "push", "PushResult",
    "resolve_checkpoint",
    "model_card", "write_model_card", "suggest_tokens", "Suggestion", "add_validate_push", "finish_add",
    "ValidationOptions", "PushOptions", "trim_vocabulary", "plan_trim", "TrimOptions", "TrimPlan", "TrimResult",
    *_LAZY,
]
