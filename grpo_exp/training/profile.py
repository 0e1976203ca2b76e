"""Sampling and scoring prompts with the current policy, outside the trainer.

The completions are drawn like TRL's GRPOTrainer draws them (chat template with the generation
prompt, left padding, the ``grpo`` group's sampling settings; an agent's through its tool calls,
``agents.rollout``) and scored by the job's own reward
parts, summed with their weights as TRL sums them (a part that returns None is left out). The
adaptive profile needs only the totals; the reward probe (grpo_exp/plan/probe.py) also reads each
part's scores, the completions' lengths and whether they were cut at ``grpo.max_completion_length``.

A job with environments (``agent.environment``) rolls out as TRL's environment_factory does: each
completion gets its own instance, reset with its dataset row (a string ``reset`` returns is appended to
the last user message, so a row's rollouts may have different prompts, each encoded on its own); its
tools are the instance's methods and the job's stateless tools; the rewards get the instances in the
completions' order (``environments=``), so ``environment_state`` scores each from its own state.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from grpo_exp.agents.env_runner import EnvironmentSet
from grpo_exp.agents.environments import tool_methods
from grpo_exp.agents.rollout import continue_with_tools
from grpo_exp.agents.tools import Tool
from grpo_exp.config.schema import GrpoSettings
from grpo_exp.rewards.compose import WeightedReward, completion_text

ENVIRONMENT_COLUMN = "environment"  # the row's column naming its environment when there are several (TRL's)


@dataclass(frozen=True)
class Rollouts:
    """A chunk's completions before sampling: each one's row, prompt (with what its reset returned),
    tools, and environment instance (None: the job has no environment)."""

    rows: list[dict[str, Any]]
    prompts: list[Any]
    tools: list[Sequence[Tool]]
    environments: list[Any] | None


@dataclass(frozen=True)
class Sampled:
    """One row's completions as scored: weighted totals, each part's scores (None: not scored), token
    and character counts, and whether each was cut at the length limit (no end-of-sequence token)."""

    totals: list[float]
    parts: dict[str, list[float | None]]
    lengths: list[int]
    truncated: list[bool]
    chars: list[int]


@dataclass
class Sampler:
    """What it takes to sample and score: the policy, its tokenizer, the rewards and the sampling settings."""

    model: Any
    tokenizer: Any
    rewards: list[WeightedReward]
    weights: list[float]
    grpo: GrpoSettings
    batch: int  # prompts per generate call
    tools: Sequence[Tool] = ()  # an agent's tools: each completion goes on through its tool calls, as in TRL
    environments: EnvironmentSet = field(default_factory=EnvironmentSet)  # the job's environment_factory, if any
    # Instances reused across chunks, reset before each rollout, as TRL pools them: the environment's
    # process holds one instance per pooled stand-in, not one per completion ever sampled.
    _pool: dict[str | None, list[Any]] = field(default_factory=dict, init=False, repr=False)

    def scores(self, rows: list[dict[str, Any]], samples: int, step: int) -> list[list[float]]:
        """The total reward of ``samples`` completions for each row (a dataset record with its ``prompt``)."""
        return [row.totals for row in self.sample(rows, samples, step)]

    def sample(self, rows: list[dict[str, Any]], samples: int, step: int | None) -> list[Sampled]:
        """``samples`` completions for each row, scored part by part.

        ``step``: the training step whose reward stages apply (parts that start later stay silent);
        None scores every part, as outside a trainer."""
        self.model.eval()  # no dropout while sampling, as TRL's generation; the next stage's trainer reloads it
        sampled: list[Sampled] = []
        for start in range(0, len(rows), self.batch):
            chunk = rows[start : start + self.batch]
            rollouts = self._rollouts(chunk, samples)
            if rollouts.environments is None:  # one prompt per row, its samples drawn together
                completions, ids = self._complete([r["prompt"] for r in chunk], [self.tools] * len(chunk), samples)
            else:  # each rollout's own prompt and tools
                completions, ids = self._complete(rollouts.prompts, rollouts.tools, 1)
            totals, parts = self._score(rollouts, completions, ids, step)
            limit, eos = self.grpo.max_completion_length, self.tokenizer.eos_token_id
            cut = [len(t) >= limit and (eos is None or t[-1] != eos) for t in ids]
            for i in range(len(chunk)):
                span = slice(i * samples, (i + 1) * samples)
                sampled.append(
                    Sampled(
                        totals[span],
                        {name: scores[span] for name, scores in parts.items()},
                        [len(t) for t in ids[span]],
                        cut[span],
                        [len(completion_text(c)) for c in completions[span]],
                    )
                )
        return sampled

    def _rollouts(self, chunk: list[dict[str, Any]], samples: int) -> Rollouts:
        """Each of the chunk's completions (``samples`` per row, in row order) as TRL starts it: with
        environments, an instance per completion, reset with the row, its reply added to the prompt."""
        repeated = [r for r in chunk for _ in range(samples)]
        factory = self.environments.factory
        if factory is None:
            return Rollouts(repeated, [r["prompt"] for r in repeated], [self.tools] * len(repeated), None)
        several = isinstance(factory, dict)
        instances = self._draw([r.get(ENVIRONMENT_COLUMN) if several else None for r in repeated])
        prompts, tools = [], []
        for row, instance in zip(repeated, instances, strict=True):
            # several environments: the column that picks one is not the environment's to read (TRL's rule)
            given = {k: v for k, v in row.items() if k != ENVIRONMENT_COLUMN} if several else row
            prompts.append(_with_observation(row["prompt"], instance.reset(**given)))
            tools.append([*self.tools, *(getattr(instance, name) for name, _ in tool_methods(type(instance)))])
        return Rollouts(repeated, prompts, tools, instances)

    def _draw(self, names: list[str | None]) -> list[Any]:
        """One instance per completion from the pool of its environment, made only when the pool runs short."""
        factory = self.environments.factory
        drawn, used = [], dict.fromkeys(names, 0)
        for name in names:
            pool = self._pool.setdefault(name, [])
            if used[name] == len(pool):
                pool.append(factory[name]() if isinstance(factory, dict) else factory())
            drawn.append(pool[used[name]])
            used[name] += 1
        return drawn

    def _complete(
        self, prompts: list[Any], tools: list[Sequence[Tool]], samples: int
    ) -> tuple[list[Any], list[list[int]]]:
        """``samples`` completions of each prompt, rendered with its tools (one list per prompt) and taken
        through their calls."""
        tok, grpo = self.tokenizer, self.grpo
        encoded = [_prompt_ids(tok, p, t) for p, t in zip(prompts, tools, strict=True)]
        ids = self._continue(encoded, grpo.max_completion_length, samples)
        if any(tools):
            starts = [encoded[i // samples] for i in range(len(ids))]
            each = [tools[i // samples] for i in range(len(ids))]
            limit, rounds = grpo.max_completion_length, grpo.max_tool_calling_iterations
            return continue_with_tools(tok, self._continue, starts, ids, each, limit, rounds)
        texts = tok.batch_decode(ids, skip_special_tokens=True)
        chat = not isinstance(prompts[0], str)
        completions = [[{"role": "assistant", "content": t}] if chat else t for t in texts]
        return completions, ids

    def _continue(self, encoded: list[list[int]], max_new: int, samples: int = 1) -> list[list[int]]:
        """``samples`` sampled continuations of each token sequence, up to ``max_new`` tokens, cut after the
        end of sequence."""
        import torch
        from transformers import GenerationConfig

        tok, grpo = self.tokenizer, self.grpo
        width = max(len(ids) for ids in encoded)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        config = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=True,
            temperature=grpo.temperature,
            top_p=grpo.top_p,
            top_k=grpo.top_k,
            min_p=grpo.min_p,
            repetition_penalty=grpo.repetition_penalty,
            pad_token_id=pad,
            eos_token_id=tok.eos_token_id,
            num_return_sequences=samples,
            **(grpo.generation_kwargs or {}),
        )
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=mask.to(device), generation_config=config
            )
        return [_until_eos(row.tolist(), tok.eos_token_id) for row in out[:, width:]]

    def _score(
        self, rollouts: Rollouts, completions: list[Any], ids: list[list[int]], step: int | None
    ) -> tuple[list[float], dict[str, list[float | None]]]:
        columns = {k: [r[k] for r in rollouts.rows] for k in rollouts.rows[0] if k != "prompt"}
        if rollouts.environments is not None:
            columns["environments"] = rollouts.environments  # as TRL passes them, in the completions' order
        # reward parts that start later (start_step) stay silent; without a step every part counts
        state = None if step is None else SimpleNamespace(global_step=step)
        totals = [0.0] * len(completions)
        parts: dict[str, list[float | None]] = {}
        for reward, weight in zip(self.rewards, self.weights, strict=True):
            part = reward(
                prompts=rollouts.prompts,
                completions=completions,
                completion_ids=ids,
                trainer_state=state,
                **columns,
            )
            parts[reward.__name__] = [s if s is not None and math.isfinite(s) else None for s in part]
            for i, score in enumerate(parts[reward.__name__]):
                if score is not None:
                    totals[i] += weight * score
        if self.environments.runner is not None:  # the calls sampled here are not the next training batch's
            self.environments.runner.take_metrics(len(completions))
        return totals, parts


def sample_rows(size: int, limit: int | None, seed: int | str) -> list[int]:
    """Row indices to sample: all of them, or a seeded sample of ``limit``, in order (a str seed, e.g.
    of several numbers joined, names a draw without one number standing for another)."""
    if limit is None or limit >= size:
        return list(range(size))
    return sorted(random.Random(seed).sample(range(size), limit))


def _prompt_ids(tokenizer: Any, prompt: Any, tools: Sequence[Tool] = ()) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer.apply_chat_template(prompt, tools=list(tools) or None, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _with_observation(prompt: Any, observation: Any) -> Any:
    """The prompt with what ``reset`` returned appended to its last message's content, as TRL appends it
    (a text joined to content parts becomes a text part); the row's own prompt is left as it was."""
    if observation is None:
        return prompt
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    return [*prompt[:-1], {**prompt[-1], "content": content + observation}]


def _until_eos(ids: list[int], eos: int | None) -> list[int]:
    """A completion's tokens up to its end-of-sequence token (the padding after it dropped)."""
    if eos is not None and eos in ids:
        return ids[: ids.index(eos) + 1]
    return ids
