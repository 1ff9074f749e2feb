"""A SentencePiece `.model` file (tokenizer.model) with new pieces appended at the end.

Why keep it rather than leave it out of the output: llama.cpp's converter (convert_hf_to_gguf.py) reads
tokenizer.model first and takes each piece's score from it; without the file it falls back to
tokenizer.json with one score (-1000) for every piece, and llama.cpp's SentencePiece tokenizer, which
merges by score, then splits old text differently from transformers (docs/gguf.md,
bench/llamacpp_parity.py). SentencePiece itself reads the appended pieces, so its own users get the
new tokens too.

Written by hand, not with the protobuf package (which the project does not depend on): a `.model` is
a serialized ModelProto whose field 1 is the repeated SentencePiece message; protobuf parsers append the
elements of a repeated field in the order they meet them, wherever they are in the message, so the
input's bytes followed by new field-1 elements are the same model with those pieces last. Only the
top-level fields are walked here (to count the pieces); nothing inside them is read or rewritten.
"""

from __future__ import annotations

import struct

# sentencepiece_model.proto, SentencePiece.Type
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
# Far below any score a SentencePiece file holds (BPE: minus the merge rank; Unigram: log probabilities; Mistral's
# files give some pieces -1e9), so that a runtime that ranks pieces by score (llama.cpp, SentencePiece's BPE) ranks
# each new piece after every old one, and the new ones in their order (the order of the merges appended to
# tokenizer.json): piece i gets LOWEST_SCORE * (1 + i * SCORE_STEP), distinct in float32.
LOWEST_SCORE = -1e30
SCORE_STEP = 1e-6


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def piece_count(data: bytes) -> int:
    """How many pieces a serialized ModelProto holds (its field-1 elements).

    Raises:
        ValueError: `data` is not a well-formed protobuf message.
    """
    i = count = 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            size, i = _varint(data, i)
            i += size
            count += field == 1
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire} at byte {i}")
        if i > len(data):
            raise ValueError("truncated field")
    return count


def with_pieces(data: bytes, pieces: list[tuple[str, int]]) -> bytes:
    """`data` (a serialized ModelProto) with `pieces` ((text, SentencePiece.Type), in id order) appended,
    scored below every old piece and in decreasing order (LOWEST_SCORE)."""
    out = bytearray(data)
    for i, (text, kind) in enumerate(pieces):
        raw = text.encode("utf-8")
        msg = (b"\x0a" + _encode_varint(len(raw)) + raw  # piece (1, string)
               + b"\x15" + struct.pack("<f", LOWEST_SCORE * (1 + i * SCORE_STEP))  # score (2, float)
               + b"\x18" + _encode_varint(kind))  # type (3, enum)
        out += b"\x0a" + _encode_varint(len(msg)) + msg  # ModelProto.pieces (1)
    return bytes(out)
