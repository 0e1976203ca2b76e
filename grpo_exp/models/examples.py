"""One warm-up conversation of the embedded model (what ``warmup`` composes and ``tiny`` trains on)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Example:
    """A warm-up conversation: the prompt and the model's last reply; an agent's also has the tools it
    is shown (JSON schemas) and the turns before its last, each a tool call as the model writes it and
    the tool's answer."""

    scenario: str
    prompt: str
    reply: str
    tools: tuple[dict[str, Any], ...] = ()
    turns: tuple[tuple[str, str], ...] = ()

    def texts(self) -> list[str]:
        """What the tokenizer trains on: every text the model reads or writes in this conversation."""
        extra = [json.dumps(schema, ensure_ascii=False) for schema in self.tools]
        return [self.prompt, self.reply, *extra, *(text for turn in self.turns for text in turn)]
