"""The corpus reader: paragraph-sized items as a line-by-line reading defines them, whatever the read size."""

from __future__ import annotations

from hypothesis import given, strategies as st

import vocabsurgeon.corpus as corpus_module
from vocabsurgeon.corpus import Reader, _cut


def by_lines(text: str, limit: int) -> list[str]:
    """The definition: a paragraph starts at a line with text after a blank line (leading blank lines are an item
    of their own); a paragraph longer than `limit` is cut by `_cut`, each piece as long as it can be."""
    paragraphs, buf, blank = [], "", False
    *lines, last = text.split("\n")
    for line in [f"{x}\n" for x in lines] + ([last] if last else []):
        if line.strip() and blank and buf:
            paragraphs.append(buf)
            buf = ""
        blank = line.endswith("\n") and not line.strip()
        buf += line
    paragraphs += [buf] if buf else []
    items = []
    for p in paragraphs:
        while len(p) > limit:
            items.append(p[:_cut(p, limit)])
            p = p[_cut(p, limit):]
        items += [p] if p else []
    return items


@given(st.lists(st.sampled_from(["a", "é", "日", "😀", " ", "  ", "\n", "\n\n", "\r\n", "\t", "\u3000", "x y", " \n", "\r",
                                         "\x1c"]),
                max_size=40).map("".join), st.sampled_from([1, 2, 3, 7, 64]), st.sampled_from([1, 2, 3, 5, 64]),
       st.booleans())
def test_the_reader_gives_the_paragraphs_of_the_text_whatever_the_read_size(tmp_path_factory, text, limit, read, bom):
    path = tmp_path_factory.mktemp("r") / "c.txt"
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    old = corpus_module.READ_BYTES
    corpus_module.READ_BYTES = read
    try:
        reader = Reader(path, limit)
        items = list(reader)
    finally:
        corpus_module.READ_BYTES = old
    assert items == by_lines(text, limit)
    assert reader.bytes == len(text.encode()) and reader.pos == path.stat().st_size
