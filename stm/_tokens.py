"""The default token count: a fast, conservative estimate from a text's length.

``estimate_tokens`` needs no tokenizer: a token per 3.5 characters and 5/7 of a
token more per UTF-8 byte past a character's first (so about 1.7 per CJK
character and 1 per accented Latin letter). For ASCII text it reads nothing
(Python knows both lengths); other text is encoded once, in C. Measured
against ``cl100k_base`` and ``o200k_base`` it is at most ``ESTIMATE_MARGIN``
under the exact count on Latin and CJK prose and chat, and usually over
(``benchmarks/w7_tokens.py`` prints the ratios). Text that is mostly long
numbers or ids is split more finely by tokenizers: there it may be up to
``NUMBERS_MARGIN`` under.
"""

from __future__ import annotations

__all__ = ["ESTIMATE_MARGIN", "NUMBERS_MARGIN", "estimate_tokens"]

# The most the estimate was seen under the exact count on the test corpus (prose and chat
# in English, French, German, Spanish, Vietnamese, Japanese, Chinese and Korean;
# tests/test_budget.py where bpe-openai is installed, and benchmarks/w7_tokens.py).
ESTIMATE_MARGIN = 0.15
# The same for text of long numbers and ids.
NUMBERS_MARGIN = 0.5


def estimate_tokens(text: str) -> int:
    """A fast, conservative token count: ``ceil(characters / 3.5 + extra UTF-8 bytes * 5/7)``."""
    n = len(text)
    if text.isascii():
        return -(-2 * n // 7)
    extra = len(text.encode("utf-8", "surrogatepass")) - n
    return -(-(4 * n + 10 * extra) // 14)
