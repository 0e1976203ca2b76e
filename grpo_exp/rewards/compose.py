"""Turning the ``reward.parts`` config into the named, weighted functions TRL's GRPOTrainer takes.

Each part becomes one TRL reward function, so TRL logs ``rewards/<part>/mean`` for it and sums the
parts with ``reward_weights``. The wrapper also hides the differences between call styles, flattens
chat completions to text, holds a part back until its stage begins (``start_step`` or ``start_when``,
see stages.py),
scales a part by another's score (``scale_by``: simplicity counts only for code that passes its
tests), checks what the function returns, and logs the part's spread within groups
(``rewards/<part>/group_std``): a part that never varies inside a group gives GRPO nothing to compare,
and the monitor says so. Each part knows its ceiling (its best score: the registry's for a built-in
part, ``reward.parts.<name>.ceiling`` for the user's), and the parts of a reward together log the
share of completions and groups at their ceilings (``solved.SolvedTally``).

A part past its time limit scores nothing for that batch (``reward.on_timeout=skip``). One that does
so ``reward.max_timeouts_in_a_row`` calls in a row, or on every call of a run (``check_answered``), fails
the run: a part that never returns would otherwise leave a run that "completes" having learnt from
none of its scores. The first part also logs the batch's ``batch_metrics`` (the agent tools' replies cut)
through TRL's ``log_metric``, which only reward functions are given.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grpo_exp.config.schema import OnTimeout, RewardPart, RewardSettings
from grpo_exp.deadline import Expired, within
from grpo_exp.errors import UserError
from grpo_exp.rewards import registry
from grpo_exp.rewards.solved import SolvedTally, group_bounds
from grpo_exp.rewards.stages import STAGE_METRIC, StageGate
from grpo_exp.rewards.task_metrics import log_task_metrics
from grpo_exp.rewards.user import CallStyle, resolve

log = logging.getLogger("grpo_exp.rewards")

# Arguments TRL passes every reward function besides the dataset's columns.
TRL_ARGUMENTS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra"})


class WeightedReward:
    """One reward part as TRL calls it; ``__name__`` is the part name TRL logs it under."""

    def __init__(
        self,
        name: str,
        part: RewardPart,
        scale_by: WeightedReward | None = None,
        gate: StageGate | None = None,
        timeout_s: float = 0.0,
        on_timeout: OnTimeout = OnTimeout.skip,
        max_timeouts_in_a_row: int = RewardSettings.max_timeouts_in_a_row,
    ) -> None:
        self.__name__ = name
        self.timeout_s = timeout_s if part.timeout_s is None else part.timeout_s  # 0: no limit
        self.timeout_key = "reward.timeout_s" if part.timeout_s is None else f"reward.parts.{name}.timeout_s"
        if not self.timeout_s >= 0:  # NaN too
            raise UserError(f"reward.parts.{name}.timeout_s={part.timeout_s}: give seconds, or 0 for no limit")
        self.on_timeout = on_timeout
        self.max_timeouts_in_a_row = max_timeouts_in_a_row
        self.timeouts_in_a_row = 0
        self.answered = self.timed_out = 0  # calls that returned within the limit, and those that didn't
        self.batch_metrics: Callable[[], dict[str, float]] | None = None  # logged by the reward's first part
        self.spec = part.fn
        self.fn, self.style = resolve(part.fn)
        self.params = dict(part.params)
        self.gate = gate or StageGate({name: part})
        self.logs_stage = False  # one part per reward logs the run's stage
        self.scale_by = scale_by
        self.ceiling = part.ceiling
        if self.style is CallStyle.BUILTIN:
            registry.check_params(part.fn, self.params)
            if self.ceiling is None:
                self.ceiling = registry.ceiling(part.fn)
        # the reply length (characters) a built-in part pays for, e.g. length_score's target
        self.asks_chars = registry.asked_length(part.fn, self.params) if self.style is CallStyle.BUILTIN else None
        if self.ceiling is not None and not math.isfinite(self.ceiling):
            raise UserError(f"reward.parts.{name}.ceiling={part.ceiling}: give the part's best score, or null")
        self.tally: SolvedTally | None = None  # shared by a reward's parts (build_rewards)
        self.task_ks: tuple[int, ...] | None = None  # the pass@k this part logs (reward.task_metrics.part)
        self._last: tuple[list[Any], list[float | None]] | None = None  # TRL scores one batch part by part
        self._warned_infinite = False  # an infinite score is warned about once per job
        if self.params and self.style is CallStyle.ARTICLE:
            raise UserError(
                f"reward part {name!r}: {part.fn} takes only `completions`, so it can't receive params "
                f"{sorted(self.params)}; give it **kwargs or drop reward.parts.{name}.params"
            )

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        scores = self._call(prompts, completions, **kwargs)
        log_metric = kwargs.get("log_metric")
        if self.tally is not None:
            self.tally.report(self.__name__, prompts, completions, scores, log_metric)
        if self.task_ks is not None and self.ceiling is not None and log_metric is not None:
            log_task_metrics(prompts, scores, self.ceiling, self.task_ks, log_metric)
        return scores

    def _call(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        log_metric = kwargs.get("log_metric")
        if self.logs_stage and state is not None and log_metric is not None:
            log_metric(STAGE_METRIC, self.gate.stage(state))
        if self.batch_metrics is not None:  # taken each batch, logged or not (the probe and profiles log none)
            for key, value in self.batch_metrics().items():
                if log_metric is not None:
                    log_metric(key, value)
        if not self.gate.counts(self.__name__, state):
            return [None] * len(completions)
        try:
            scores = self._within_limit(lambda: self._score(prompts, completions, kwargs))
            if scores is None:  # past its time limit, skipped for this batch
                return [None] * len(completions)
        except UserError:
            raise
        except Exception as exc:  # the user's code failed: their input, so the same exit code as a bad return
            raise UserError(f"reward part {self.__name__!r} ({self.spec}) raised {type(exc).__name__}: {exc}") from exc
        checked = self._checked(scores, len(completions))
        if self.scale_by is not None:
            factors = self.scale_by.scores_for(prompts, completions, **kwargs)
            checked = [s if s is None or f is None else s * f for s, f in zip(checked, factors, strict=True)]
        self._last = (completions, checked)
        if log_metric is not None and (spread := group_std(prompts, checked)) is not None:
            log_metric(f"rewards/{self.__name__}/group_std", spread)
        return checked

    def _score(self, prompts: list[Any], completions: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.style is CallStyle.TRL:
            return self.fn(prompts=prompts, completions=completions, **kwargs, **self.params)
        if self.style is CallStyle.ARTICLE:
            return self.fn([completion_text(c) for c in completions])
        given = completions if self.spec in registry.MESSAGE_PARTS else [completion_text(c) for c in completions]
        return self.fn(given, prompts=prompts, **{**kwargs, **self.params})

    def _within_limit(self, call: Callable[[], Any]) -> Any:
        """The part's scores, or None when the call outlives ``timeout_s`` (``on_timeout: skip``), until
        it has done so ``max_timeouts_in_a_row`` times in a row: then the run fails.

        The call runs in a thread of its own (``grpo_exp.deadline``), so the training process keeps
        control: a stop signal is handled, and the job goes on without the part's scores for that batch."""
        try:
            scores = within(call, self.timeout_s, f"reward-{self.__name__}")
        except Expired:
            pass
        else:
            self.answered += 1
            self.timeouts_in_a_row = 0
            return scores
        self.timed_out += 1
        self.timeouts_in_a_row += 1
        where = f"reward part {self.__name__!r} ({self.spec}) took over {self.timeout_s:g} s"
        if self.on_timeout is OnTimeout.fail:
            raise UserError(f"{where}; raise {self.timeout_key} (0: no limit) or make the call return") from None
        if self.timeouts_in_a_row >= self.max_timeouts_in_a_row:
            raise UserError(
                f"{where} ({self.timeout_key}) on {self.timeouts_in_a_row} calls in a row "
                "(reward.max_timeouts_in_a_row): the run has no scores from it; make the call return, or raise "
                "the limit (0: no limit)"
            ) from None
        log.warning("%s: no %s scores for this batch (reward.on_timeout=skip)", where, self.__name__)
        return None

    def scores_for(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        """This batch's scores: the ones just computed when TRL has already called this part, else fresh."""
        if self._last is not None and self._last[0] == completions:
            return self._last[1]
        return self(prompts, completions, **kwargs)

    def _checked(self, scores: Any, expected: int) -> list[float | None]:
        try:
            values = [None if s is None else float(s) for s in scores]
        except (TypeError, ValueError):
            raise UserError(
                f"reward part {self.__name__!r} ({self.spec}) must return a list of numbers or None, "
                f"got {type(scores).__name__}"
            ) from None
        if len(values) != expected:
            raise UserError(
                f"reward part {self.__name__!r} ({self.spec}) returned {len(values)} scores for {expected} completions"
            )
        infinite = sum(1 for v in values if v is not None and math.isinf(v))
        if infinite and not self._warned_infinite:
            self._warned_infinite = True
            log.warning(
                "reward part %r (%s) returned inf or -inf for %d of %d completions: they get no score, like NaN "
                "(an infinite score would make every advantage in its group NaN); return a finite number",
                self.__name__,
                self.spec,
                infinite,
                len(values),
            )
        return [None if v is not None and not math.isfinite(v) else v for v in values]


def check_answered(rewards: Sequence[WeightedReward]) -> None:
    """A one-line ``UserError`` for the first part that was called and never returned within its time
    limit: the run got none of its scores (shorter than ``reward.max_timeouts_in_a_row`` calls, it was
    not stopped on the way)."""
    for reward in rewards:
        if reward.timed_out and not reward.answered:
            raise UserError(
                f"reward part {reward.__name__!r} ({reward.spec}) never returned within {reward.timeout_s:g} s "
                f"({reward.timeout_key}) in {reward.timed_out} calls: the run has no scores from it; make the call "
                "return, or raise the limit (0: no limit)"
            )


def required_columns(reward: WeightedReward) -> set[str]:
    """Dataset columns a reward cannot run without: its required named arguments that TRL does not
    supply and no param fills, plus a ``column`` param's value (the built-in parts' way to name one)."""
    if reward.style is CallStyle.ARTICLE:
        return set()
    params = inspect.signature(reward.fn).parameters.values()
    named = {
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty and p.name not in reward.params
    }
    supplied = TRL_ARGUMENTS | ({"completions"} if reward.style is CallStyle.BUILTIN else set())
    column = reward.params.get("column")
    return (named - supplied) | ({column} if isinstance(column, str) else set())


def group_std(prompts: list[Any], scores: list[float | None]) -> float | None:
    """Mean standard deviation of ``scores`` within each group (a run of equal prompts); None without a group.

    TRL lays a group's completions side by side, so consecutive equal prompts are one group; unscored
    completions (None) are left out, and a group needs two scores to have a spread.
    """
    spreads: list[float] = []
    for start, end in group_bounds(prompts):
        values = [s for s in scores[start:end] if s is not None]
        if len(values) > 1:
            mean = sum(values) / len(values)
            spreads.append(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
    return sum(spreads) / len(spreads) if spreads else None


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the contents of TRL's chat messages joined."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    return "".join(completion_text(message) for message in completion)


def build_rewards(
    settings: RewardSettings, batch_metrics: Callable[[], dict[str, float]] | None = None
) -> tuple[list[WeightedReward], list[float]]:
    """The reward functions and weights for ``GRPOTrainer(reward_funcs=..., args.reward_weights=...)``;
    ``batch_metrics``: what else each batch logs (through the first part's ``log_metric``)."""
    if not settings.parts:
        raise UserError("no reward parts configured: pick a reward, e.g. reward=customer_service")
    gate = StageGate(settings.parts)
    built: dict[str, WeightedReward] = {}
    for name in _scaling_order(settings.parts):
        part = settings.parts[name]
        scaled_by = built[part.scale_by] if part.scale_by else None
        built[name] = WeightedReward(
            name, part, scaled_by, gate, settings.timeout_s, settings.on_timeout, settings.max_timeouts_in_a_row
        )
    functions = [built[name] for name in settings.parts]  # TRL calls them in the config's order
    functions[0].logs_stage = gate.staged
    functions[0].batch_metrics = batch_metrics
    weights = [float(part.weight) for part in settings.parts.values()]
    if not all(math.isfinite(w) for w in weights) or not any(weights):
        raise UserError(f"reward weights {weights} must be finite and not all zero")
    tally = SolvedTally({f.__name__: f.ceiling for f in functions}, dict(zip(settings.parts, weights, strict=True)))
    for function in functions:
        function.tally = tally
    if (task_part := settings.task_metrics.part) is not None:
        _measure_task(built, task_part, settings.task_metrics.k)
    return functions, weights


def _measure_task(built: dict[str, WeightedReward], name: str, ks: list[int]) -> None:
    """Make part ``name`` log the task metrics; it needs a ceiling, the score that means solved."""
    if name not in built:
        raise UserError(f"reward.task_metrics.part={name}: no such part (parts: {', '.join(built)})")
    if built[name].ceiling is None:
        raise UserError(
            f"reward.task_metrics.part={name}: the part declares no best score; set reward.parts.{name}.ceiling"
        )
    if not ks or any(not isinstance(k, int) or k < 1 for k in ks):
        raise UserError(f"reward.task_metrics.k={list(ks)}: give whole numbers of samples, each at least 1")
    built[name].task_ks = tuple(ks)


def _scaling_order(parts: dict[str, RewardPart]) -> list[str]:
    """Part names with every ``scale_by`` target before the parts it scales; refuses unknown targets and cycles."""
    order: list[str] = []
    for name in parts:
        chain = [name]
        while (target := parts[chain[-1]].scale_by) and target not in order:
            if target not in parts:
                raise UserError(f"reward.parts.{chain[-1]}.scale_by={target}: no such part (parts: {', '.join(parts)})")
            if target in chain:
                raise UserError(f"reward parts scale each other in a circle: {' -> '.join([*chain, target])}")
            chain.append(target)
        order.extend(n for n in reversed(chain) if n not in order)
    return order
