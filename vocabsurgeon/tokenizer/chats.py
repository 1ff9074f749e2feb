"""The sample conversations that add's plan and validation render with a checkpoint's chat template.

The rendered text is old text that must keep its ids (a new "assistant" would re-tokenize every chat
prompt); validation also runs it through both models. One set, used by both.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..checkpoint.reader import read_json
from ..checkpoint.filenames import CHAT_TEMPLATE_FILES, TOKENIZER_CONFIG

logger = logging.getLogger(__name__)

# Conversations rendered with the checkpoint's chat template: the rendered text is old text, which
# must keep its ids (a new "assistant" would re-tokenize every prompt), and validation runs it. The
# first two have no system turn, so that a template's default system prompt (Qwen, SmolLM) renders.
CHATS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("user", "What is the capital of France?"), ("assistant", "The capital of France is Paris.")),
    (("user", "Write a short poem about the sea."),
     ("assistant", "Waves fold over waves,\nsalt light on the morning shore,\nthe tide keeps its time."),
     ("user", "Thanks! Now make it rhyme.")),
    (("system", "You are a helpful assistant. Answer briefly."), ("user", "How many legs does a spider have?"),
     ("assistant", "A spider has eight legs.")),
    (("system", "You are a careful programmer."), ("user", "Write a Python function that adds two numbers."),
     ("assistant", "def add(a, b):\n    return a + b")),
)


def chat_template(directory: str | Path, tokenizer_config: dict | None = None) -> str | None:
    """The checkpoint's chat template (chat_template.jinja, or tokenizer_config.json's `chat_template`);
    `tokenizer_config`: that file as already read (it is then not read again)."""
    directory = Path(directory)
    if (directory / CHAT_TEMPLATE_FILES[0]).is_file():
        return (directory / CHAT_TEMPLATE_FILES[0]).read_text(encoding="utf-8")
    cfg = directory / TOKENIZER_CONFIG
    if tokenizer_config is None and cfg.is_file():
        tokenizer_config = read_json(cfg)
    template = (tokenizer_config or {}).get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) and template.strip() else None


def has_chat_template(tok) -> bool:
    """Whether a loaded transformers tokenizer has a chat template."""
    return bool(getattr(tok, "chat_template", None))


def _render(tok, turns, generation_prompt: bool) -> str | None:
    """One conversation through the chat template, or None when the template refuses it (e.g. no system role)."""
    messages = [{"role": r, "content": c} for r, c in turns]
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception as e:  # a template may raise on a role it does not support (Gemma: no system turn)
        logger.debug("the chat template refuses a conversation (%s)", e)
        return None
    return text if isinstance(text, str) and text else None


def render_chats(tok, generation_prompt: bool = False) -> list[tuple[str, list[str]]]:
    """The sample conversations (CHATS) rendered with a loaded tokenizer's chat template, each with
    the texts of its messages; [] without a template. With `generation_prompt`, each conversation up
    to its last user turn, ending in the template's generation prompt (what a chat user sends)."""
    if not has_chat_template(tok):
        return []
    out = []
    for turns in CHATS:
        if generation_prompt:
            turns = turns[:max(i for i, (role, _) in enumerate(turns) if role == "user") + 1]
        text = _render(tok, turns, generation_prompt)
        if text is not None:
            out.append((text, [c for _, c in turns]))
    return out


def chat_samples(directory: str | Path, tokenizer_config: dict | None = None, loaded=None) -> list[str]:
    """The checkpoint's chat template rendered by transformers with the sample conversations
    (CHATS), whole and as prompts ending in the generation prompt; [] without a chat template.
    `tokenizer_config`: that file as already read; `loaded`: returns the tokenizer as AutoTokenizer
    loads it (None when it cannot), so a caller that has it does not load it again.

    Example:
        >>> chat_samples("fixtures/gpt2-tiny")  # no chat template
        []
    """
    if chat_template(directory, tokenizer_config) is None:
        return []
    try:
        from transformers import AutoTokenizer

        tok = loaded() if loaded is not None else AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    except Exception as e:  # transformers' loader raises many types; the template is then not checked
        tok, why = None, f"{type(e).__name__}: {e}"
    else:
        why = "AutoTokenizer could not load it"
    if tok is None:
        logger.warning("%s: cannot load the tokenizer with transformers to render its chat template (%s)", directory, why)
        return []
    texts: list[str] = []
    for generation_prompt in (False, True):
        texts += [t for t, _ in render_chats(tok, generation_prompt) if t not in texts]
    return texts
