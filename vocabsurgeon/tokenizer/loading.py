"""Which class transformers loads a checkpoint's tokenizer with, and what that class sets by default.

Pure functions over an opened tokenizer (`opened`, an `opened.OpenedTokenizer`, which holds their answers, each
asked once; not imported here, since it imports this room): the class forced on the model type
(`forced_class`), a LlamaTokenizer over a byte-level file (`llama_class_over_byte_level`), whether the loaded
class tokenizes old text otherwise than the file (`loads_otherwise`), the tokenizer as AutoTokenizer loads it
(`as_loaded`) and the defaults a replaced class took with it (`class_defaults`, `class_note`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import logging
from pathlib import Path

from tokenizers import Tokenizer

from .encoding import encode_ids, unpadded
from .families.sentencepiece_bpe import PIPELINE

logger = logging.getLogger(__name__)

# tokenizer_config classes that load tokenizer.json without rebuilding it.
FILE_AS_WRITTEN_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}
# Old text on which pre-tokenizers disagree: contractions, digit runs, spaces and newlines, punctuation, scripts.
PROBES = ("I don't", "it's", "we'll", "THEY'RE", "you've", "O'Neil's", "12345", "3.14159", "2024-11-25", "1,000,000",
          "Hello, world!", "(x) [y] {z}", '"q"', "'r'", "x=y", "a+b", "<tag>", "path/to/file.py", "#1 @me",
          "  two  spaces", "\n\n\tTabbed\r\n", "   end ", "Müller, Björk and Zoë", "naïve", "Москва", "日本語のテキスト",
          "😀🎉.", "getUserName", "snake_case", "CamelCase", "HTTPServer", "iPhone")
# Why a LlamaTokenizer(Fast) class over a byte-level tokenizer.json is replaced (`llama_class_over_byte_level`)
BYTE_LEVEL_UNDER_LLAMA = ("transformers 5.17 to 5.21 rebuild a byte-level tokenizer.json under LlamaTokenizer with "
                          "SentencePiece's pre-tokenizer, which gives most text other ids; 5.22 on load it as written")

# What a tokenizer class may set for itself (LlamaTokenizer pads on the left) that a tokenizer loaded as
# written (PreTrainedTokenizerFast) takes from tokenizer_config.json only.
CLASS_ATTRIBUTES = ("padding_side", "truncation_side", "model_input_names")


def class_defaults(name: str | None, cfg: dict, loaded=None) -> dict:
    """What the tokenizer AutoTokenizer loaded (`loaded`, the instance), or else transformers' class `name`,
    sets by default and PreTrainedTokenizerFast sets otherwise, where tokenizer_config.json `cfg` does not
    set it: written when the class is replaced, so that the tokenizer loaded as written pads, truncates and
    names its special tokens as the input did. The instance decides where there is one: a class name is not
    what loads (DeepSeek V3 names LlamaTokenizerFast, which pads left, over a byte-level file that
    transformers 5 loads as TokenizersBackend, which pads right), and a converted tokenizer.model
    (Mistral's) gets its BOS, EOS and UNK from the converting class, not from any file."""
    if name in FILE_AS_WRITTEN_CLASSES or (name is None and loaded is None):
        return {}
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

        source = loaded if loaded is not None else tokenizer_class_from_name(name)
    except Exception:  # an old or broken transformers: the class keeps its own defaults unknown
        return {}
    if source is None:
        return {}
    out = {k: getattr(source, k) for k in CLASS_ATTRIBUTES
           if k not in cfg and getattr(source, k, None) is not None
           and getattr(source, k) != getattr(PreTrainedTokenizerFast, k)}
    if loaded is not None:
        out.update({k: v for k, v in loaded.special_tokens_map.items()
                    if k.endswith("_token") and isinstance(v, str) and k not in cfg})
        extra = getattr(loaded, "extra_special_tokens", None)  # Mistral v0.3's [INST] and 768 [control_N]
        if extra and isinstance(extra, list) and not {"extra_special_tokens", "additional_special_tokens"} & set(cfg):
            out["extra_special_tokens"] = [str(t) for t in extra]
    return out


@functools.lru_cache(maxsize=1)
def _types_with_incorrect_hub_class() -> frozenset[str] | set:
    """transformers' MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, read from the installed tokenization_auto.py's
    source without importing it: importing transformers costs seconds, more than a whole `add --no-validate`,
    and the list is a literal set of strings. Where the source cannot be read as such, an object that holds
    every model type, so that `forced_class` imports transformers and asks it (the source of truth)."""

    class _Every(set):
        def __contains__(self, item) -> bool:
            return True

    try:
        spec = importlib.util.find_spec("transformers")
        if spec is None or spec.origin is None:
            return frozenset()  # no transformers: nothing is forced
        source = Path(spec.origin).parent / "models" / "auto" / "tokenization_auto.py"
        for node in ast.parse(source.read_text(encoding="utf-8")).body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS":
                return frozenset(ast.literal_eval(node.value))
        return frozenset()  # a transformers without the list (forced_class then finds nothing either)
    except (OSError, SyntaxError, ValueError):
        return _Every()



def forced_class(opened) -> str | None:
    """The tokenizer class transformers loads this checkpoint with whatever tokenizer_class says, or None.

    transformers 5 lists model types whose Hub tokenizer_config.json names a wrong class
    (tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: qwen2, phi3, internlm2, ...) and loads
    them with the class it registers for the type (Qwen2Tokenizer), which builds its own BPE model
    from vocab and merges: tokenizer.json's model options (ignore_merges) are lost. Read from
    config.json's model_type; None without one, or with a transformers that has no such list (the
    in-memory load of the plan still checks what loads)."""
    model_type = opened.model_config.get("model_type")
    if model_type is None or model_type not in _types_with_incorrect_hub_class():
        return None
    try:
        from transformers.models.auto import tokenization_auto as auto
    except Exception:  # noqa: BLE001 - no transformers list: nothing is known to be forced
        return None
    if model_type in getattr(auto, "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS", ()):
        name = (getattr(auto, "TOKENIZER_MAPPING_NAMES", {}).get(model_type) or "").removesuffix("Fast")
        if name and name not in FILE_AS_WRITTEN_CLASSES | {"PythonBackend"}:
            return name
    return None


def llama_class_over_byte_level(opened) -> str | None:
    """The class tokenizer_config.json names where it is LlamaTokenizer(Fast) over a byte-level tokenizer.json
    (DeepSeek V3's layout), else None.

    transformers 5.22 on load such a file as written (TokenizersBackend); 5.17 to 5.21 rebuild it with
    LlamaTokenizer's SentencePiece pipeline (Metaspace), which gives most text other ids (a Russian paragraph
    three). So the input is read as 5.22 loads it and the output names PreTrainedTokenizerFast, which every
    supported transformers loads as written. The test is transformers 5.22's own (tokenization_auto.py: no
    auto_map, the model type not Mistral's, '"ByteLevel"' in tokenizer.json: here in its pipeline)."""
    cfg = opened.config or {}
    declared = cfg.get("tokenizer_class")
    if opened.converted_from is None and isinstance(declared, str) \
            and declared.removesuffix("Fast") == "LlamaTokenizer" and not cfg.get("auto_map") \
            and '"ByteLevel"' in json.dumps([opened.data.get(k) for k in PIPELINE]):
        try:
            from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES
        except Exception:  # noqa: BLE001 - no mapping to ask: no model type is Mistral's
            TOKENIZER_MAPPING_NAMES = {}
        mapped = TOKENIZER_MAPPING_NAMES.get(opened.model_config.get("model_type")) or ""
        if not isinstance(mapped, str) or mapped.removesuffix("Fast") != "MistralCommonBackend":
            return declared
    return None


def loads_otherwise(opened) -> tuple[str, str] | None:
    """Where transformers loads the input with a class that rebuilds the tokenizer (tokenizer_class, or
    `forced_class`) and the rebuilt one tokenizes old text otherwise than tokenizer.json as written does:
    (the class, a text whose ids differ), else None.

    GPT-4o's published files name GPT2Tokenizer over o200k's tokenizer.json: transformers 5 rebuilds it
    with GPT-2's regex ("don't" is "Ġdon" + "'t"; the file's regex gives "Ġdon't"). Switching such a
    checkpoint to PreTrainedTokenizerFast would change old text, so the class stays, and a word that
    needs tokenizer.json loaded as written is skipped. Checked on PROBES, texts where pre-tokenizers
    disagree (contractions, digits, spaces, punctuation, scripts)."""
    declared = (opened.config or {}).get("tokenizer_class")
    rebuilds = opened.forced_class() or (declared if declared not in FILE_AS_WRITTEN_CLASSES else None)
    base = opened.loaded_original if rebuilds and not opened.converted_from else None
    if base is not None:
        for text, want, got in zip(PROBES, encode_ids(opened.tok, list(PROBES)), encode_ids(base, list(PROBES))):
            if want != got:
                return opened.loaded_class or rebuilds, text
    return None


def as_loaded(opened):
    """The original as `AutoTokenizer` loads it, or None when transformers cannot load it."""
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast

        # as transformers >= 5.22 loads it (5.17 to 5.21 rebuild it with Metaspace: llama_class_over_byte_level)
        loader = PreTrainedTokenizerFast if opened.llama_class_over_byte_level() else AutoTokenizer
        return loader.from_pretrained(str(opened.dir), trust_remote_code=False)
    except Exception as e:  # transformers raises many types; then every difference counts
        logger.info("transformers cannot load %s (%s: %s)", opened.dir, type(e).__name__, e)
        return None


def backend_of(loaded) -> Tokenizer | None:
    """The `tokenizers.Tokenizer` of a transformers tokenizer `loaded` (None: None), unpadded."""
    return unpadded(Tokenizer.from_str(loaded.backend_tokenizer.to_str())) if loaded is not None else None


def built_pipeline(loaded: Tokenizer | None) -> dict | None:
    """The normalizer, pre-tokenizer and decoder of `loaded` (the original as transformers builds it), or None."""
    if loaded is None:
        return None
    data = json.loads(loaded.to_str())
    return {k: data.get(k) for k in PIPELINE}


def input_class_defaults(opened) -> dict:
    """`class_defaults` of the input: what the tokenizer AutoTokenizer loads sets that tokenizer_config.json
    does not (the class named there where transformers cannot load it)."""
    cfg = opened.config or {}
    return class_defaults(cfg.get("tokenizer_class"), cfg, opened.as_loaded())


def class_note(opened, why: str) -> str:
    """The note of a plan whose tokenizer_config.json gets tokenizer_class PreTrainedTokenizerFast, for reason `why`."""
    kept = "".join(f", {k} {f'({len(v)} tokens)' if isinstance(v, list) else repr(v)} kept"
                   for k, v in input_class_defaults(opened).items())
    return (f"tokenizer_class {(opened.config or {}).get('tokenizer_class')} -> PreTrainedTokenizerFast, so "
            f"transformers loads tokenizer.json as written ({why}{kept})")
