"""The code in a model's completion: the first fenced block, or the whole text."""

from __future__ import annotations

import re

PYTHON_TAGS = frozenset({"python", "py", "python3"})
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)


def extract_code(completion: str) -> str:
    """The first ```python block, else the first ``` block, else ``completion`` itself.

    A block the model did not close (generation cut off) runs to the end of the text.
    """
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(completion)]
    for tag, body in blocks:
        if tag in PYTHON_TAGS:
            return body
    return blocks[0][1] if blocks else completion
