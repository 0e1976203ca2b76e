"""One warm-up conversation of the embedded model (what ``warmup`` composes and ``tiny`` trains on)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Example:
    """A warm-up conversation: the prompt and the model's reply; an agent's also has the tools it is
    shown (JSON schemas), its first turn (a tool call as it writes it) and the tool's answer."""

    scenario: str
    prompt: str
    reply: str
    tools: tuple[dict[str, Any], ...] = ()
    call: str | None = None
    tool_reply: str | None = None

    def texts(self) -> list[str]:
        """What the tokenizer trains on: every text the model reads or writes in this conversation."""
        extra = [json.dumps(schema, ensure_ascii=False) for schema in self.tools]
        return [self.prompt, self.reply, *extra, *(t for t in (self.call, self.tool_reply) if t is not None)]
