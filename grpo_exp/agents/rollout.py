"""An agent's rollout outside the trainer, as TRL's GRPOTrainer runs it (its tool-call loop).

The reward probe and the adaptive profile sample the policy without a trainer; for a job with tools
they must see what training sees: the model's first turn parsed for tool calls, each call run and its
result (or error) sent back as a ``tool`` message framed by the chat template, the model going on
from there, up to ``grpo.max_tool_calling_iterations`` rounds, and every token of it, tool replies
included, counted against ``grpo.max_completion_length``. Parsing and framing are TRL's own. Each
completion has its own tools, as in TRL with environments: its environment instance's methods (and
the job's stateless tools), so one rollout's calls act on its own state only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Generate = Callable[[list[list[int]], int], list[list[int]]]  # (inputs, max new tokens) -> one continuation each


def parse_turn(tokenizer: Any, ids: list[int], prefix: list[int], tools: Sequence[Any]) -> dict[str, Any]:
    """The model's turn as a chat message, its tool calls parsed as TRL parses them."""
    from trl.chat_template_utils import add_response_schema, parse_response

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)  # as GRPOTrainer does for the chat templates it knows
    return parse_response(tokenizer, ids, prefix=prefix, tools=list(tools)) if ids else {}


def run_calls(calls: list[dict[str, Any]], tools: Sequence[Callable[..., Any]]) -> list[dict[str, Any]]:
    """The ``tool`` messages answering ``calls``: each tool's result, or ``{"error": ...}`` as TRL replies."""
    by_name = {tool.__name__: tool for tool in tools}
    replies = []
    for call in calls:
        function = call.get("function", {})
        name = function.get("name", "unknown")
        try:
            if name not in by_name:
                raise ValueError(f"Tool {name} not found.")
            result: Any = by_name[name](**(function.get("arguments") or {}))
        except Exception as exc:
            result = {"error": str(exc)}
        replies.append({"role": "tool", "name": name, "content": str(result)})
    return replies


def suffix_framer(tokenizer: Any) -> Callable[[list[dict[str, Any]]], list[int]]:
    """The tokens TRL appends after a turn that called tools, as a function of the replies: the replies,
    then the next turn's start.

    Derived from the chat template as GRPOTrainer derives them (with TRL's training template where the
    model's own isn't prefix-preserving): a short conversation whose assistant turn calls the first
    reply's tool is rendered without and with the replies (and the next turn's start); the suffix is
    what the replies add after the call's end of turn. tests/test_trl_contract.py holds it equal to
    the trainer's own. The template is settled once, here."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)

    def render(messages: list[dict[str, Any]], next_turn: bool) -> list[int]:
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=next_turn, tokenize=True, chat_template=template, return_dict=False
        )
        return list(ids)

    def suffix(replies: list[dict[str, Any]]) -> list[int]:
        call = {"type": "function", "function": {"name": replies[0]["name"], "arguments": {}}}
        turns = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        before, after = render(turns, next_turn=False), render(turns + replies, next_turn=True)
        ends = [i for i, token in enumerate(before) if token == tokenizer.eos_token_id]
        before = before[: ends[-1] + 1] if ends else before  # a template may write a newline after the end of turn
        if after[: len(before)] != before:
            raise ValueError("the chat template renders the tool replies' conversation with another beginning")
        return after[len(before) :]

    return suffix


def continue_with_tools(
    tokenizer: Any,
    generate: Generate,
    prompts: list[list[int]],
    completions: list[list[int]],
    tools: Sequence[Sequence[Callable[..., Any]]],
    max_tokens: int,
    max_rounds: int | None,
) -> tuple[list[list[dict[str, Any]]], list[list[int]]]:
    """Each first turn (``completions``, after ``prompts``) taken through its tool calls: the messages of
    every completion and all its tokens (tool replies included), at most ``max_tokens`` of them.

    ``tools``: one list per completion, the tools its prompt was rendered with and its calls run on."""
    ids = [list(c) for c in completions]
    messages = [[parse_turn(tokenizer, c, p, t)] for c, p, t in zip(ids, prompts, tools, strict=True)]
    pending = [i for i, m in enumerate(messages) if m[-1].get("tool_calls")]
    if not pending:
        return messages, ids
    suffix_ids, rounds = suffix_framer(tokenizer), 0
    while pending and (max_rounds is None or rounds < max_rounds):
        inputs, going = [], []
        for i in pending:
            replies = run_calls(messages[i][-1]["tool_calls"], tools[i])
            extended = ids[i] + suffix_ids(replies)
            if len(extended) > max_tokens:  # TRL drops a reply that would pass the limit and ends the rollout
                continue
            messages[i] += replies
            ids[i] = extended
            inputs.append(prompts[i] + extended)
            going.append(i)
        if not going:
            break
        turns = generate(inputs, max(max_tokens - len(ids[i]) for i in going))
        for i, turn in zip(going, turns, strict=True):
            turn = turn[: max_tokens - len(ids[i])]
            parsed = parse_turn(tokenizer, turn, prompts[i] + ids[i], tools[i])
            ids[i] += turn
            if parsed:
                messages[i].append(parsed)
        pending = [i for i in going if messages[i][-1].get("tool_calls")]
        rounds += 1
    return messages, ids
