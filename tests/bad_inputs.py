"""Hostile and unusual inputs, kept in one place and shared by the API, app and browser tests."""

BAD_INPUTS: dict[str, str] = {
    "empty": "",
    "whitespace only": " \t\n  ",
    "one character": "a",
    "10,000 characters": ("A man rides a bike. " * 500)[:10_000],
    "one 500-character word": "x" * 500,
    "emoji": "A dog 🐕 plays with a ball ⚽ 🎉",
    "CJK": "一个男人在骑自行车。",
    "Arabic (right-to-left)": "رجل يركب دراجة",
    "Hebrew (right-to-left)": "איש רוכב על אופניים",
    "combining marks": "Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o\u0357 e\u0301 n\u0303",
    "zero-width characters": "a\u200bman\u200c rides\u200d a\ufeff bike\u2060",
    "control characters": "a man\x01\x02\x1b[31m rides\x7f a bike\r\n",
    "NUL": "a man\x00 rides a bike",
    "lone surrogates": "a man \ud800 rides \udfff a bike",
    "HTML and script tags": '<script>alert("x")</script><img src=x onerror=alert(1)><b>bold</b>',
    "markdown": "# Title\n**bold** _italic_ [link](http://example.com) `code` | a | b |\n---",
    "only punctuation": "!?.,;:--...\"'()[]{}",
    "only digits": "0123456789 42 3.14159",
    "same token 300 times": " ".join(["dog"] * 300),
}

# Inputs whose text must never reach a page unescaped.
MARKUP_INPUTS = ("HTML and script tags", "markdown")
