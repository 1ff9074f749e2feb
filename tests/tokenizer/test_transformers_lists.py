"""What the editor reads of transformers without importing it equals what transformers itself holds."""

from vocabsurgeon.tokenizer.loading import _types_with_incorrect_hub_class


def test_incorrect_hub_class_types_read_from_source_equal_the_imported_list():
    from transformers.models.auto import tokenization_auto as auto

    want = set(getattr(auto, "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS", ()))
    got = _types_with_incorrect_hub_class()
    assert set(got) == want
    assert all(t in got for t in want) and "gpt2" not in got and "llama" not in got
