"""The memory plan as a console table: one row per item, one column per phase, the peak and verdict."""

from __future__ import annotations

from grpo_exp.memory.estimate import FITS, FITS_SHARE, GIB, MIB, MemoryPlan

NAME_WIDTH = 32
COLUMN_WIDTH = 15
MILLION = 1e6


def format_plan(plan: MemoryPlan, title: str | None = None) -> str:
    """The plan's table, its peak, its verdict and (when it doesn't fit) the remedies."""
    target, arch = plan.target, plan.architecture
    lines = [title] if title else []
    processes = f"{target.processes} process{'es' if target.processes > 1 else ''}"
    sharding = "" if target.sharding == "none" else f", {target.sharding}"
    lines.append(
        f"memory plan: {plan.model} ({arch.model_type}, {arch.parameters / MILLION:.1f}M parameters, "
        f"{plan.trainable / MILLION:.2f}M trainable) on a {target.device} ({format_bytes(target.memory)}, "
        f"{target.memory_source}), {processes}{sharding}, autocast {target.precision}, weights {target.weight_dtype}"
    )
    names = list(dict.fromkeys(name for phase in plan.phases for name in phase.items))
    header = "per device".ljust(NAME_WIDTH) + "".join(p.name.rjust(COLUMN_WIDTH) for p in plan.phases)
    lines += [header, "-" * len(header)]
    for name in names:
        cells = (format_bytes(p.items[name]) if name in p.items else "" for p in plan.phases)
        lines.append(name.ljust(NAME_WIDTH) + "".join(cell.rjust(COLUMN_WIDTH) for cell in cells))
    lines.append("-" * len(header))
    lines.append("total".ljust(NAME_WIDTH) + "".join(format_bytes(p.total).rjust(COLUMN_WIDTH) for p in plan.phases))
    lines.append(f"peak: {format_bytes(plan.peak_bytes)} per device, in {plan.peak.name}; {_verdict(plan)}")
    lines += [f"note: {note}" for note in plan.notes]
    if plan.fits is False:
        if plan.remedies:
            lines.append("the article's remedies for out-of-memory (problem 3), each alone:")
            for number, remedy in enumerate(plan.remedies, 1):
                verdict = remedy.verdict or "no verdict"
                lines.append(
                    f"  {number}. {remedy.name}: {remedy.change} -> {format_bytes(remedy.peak_bytes)} ({verdict})"
                )
        else:
            lines.append("none of the article's remedies lowers this peak")
    return "\n".join(lines)


def _verdict(plan: MemoryPlan) -> str:
    memory = plan.target.memory
    if memory is None:
        return f"no verdict ({plan.target.memory_source})"
    share = plan.peak_bytes / memory
    line = f"{plan.verdict} {format_bytes(memory)} ({share:.0%}"
    if plan.verdict == FITS:
        return line + ")"
    return line + f"; fits means within {FITS_SHARE:.0%}: the allocator's slack and the plan's error take the rest)"


def format_bytes(value: int | None) -> str:
    if value is None:
        return "?"
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / MIB:.1f} MiB"
