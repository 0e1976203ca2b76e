"""``python -m grpo_exp.dashboard <sweep folder> [--entity E] [--project P] [--offline]``: the sweep's W&B view;
``--local [--port N]``: trackio's dashboard of the sweep on this machine."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from grpo_exp.errors import EXIT_USER_ERROR, UserError
from grpo_exp.folder import OFFLINE_RUNS, JobFolder


def main(argv: list[str] | None = None) -> int:
    """Save the sweep's W&B view and print its URL; offline, print where its specification is and what to run."""
    parser = argparse.ArgumentParser(
        prog="python -m grpo_exp.dashboard", description="A saved W&B view (workspace) for one sweep's runs."
    )
    parser.add_argument("sweep_dir", type=Path, help="the sweep folder (outputs/multirun/...)")
    parser.add_argument("--entity", help="W&B team or user (default: the jobs' logger.entity, else your default)")
    parser.add_argument("--project", help="W&B project (default: the one the jobs logged to)")
    parser.add_argument("--offline", action="store_true", help="write the view's specification only")
    parser.add_argument("--local", action="store_true", help="serve the sweep's trackio runs here (logger=trackio)")
    parser.add_argument("--port", type=int, help="the local dashboard's port (default: the first free from 7860)")
    args = parser.parse_args(argv)
    if args.local:
        return _local(args.sweep_dir, args.port)
    from grpo_exp.dashboard.publish import publish

    try:
        result = publish(args.sweep_dir, args.entity, args.project, online=not args.offline)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(f"view specification: {result.spec_path}")
    if result.url:
        print(f"W&B view: {result.url}")
        return 0
    options = [(flag, value) for flag, value in (("--entity", args.entity), ("--project", args.project)) if value]
    again = shlex.join(["python", "-m", "grpo_exp.dashboard", str(args.sweep_dir), *(x for o in options for x in o)])
    print(f"not saved on W&B ({result.why_not_saved}); to create it, once logged in (`wandb login`) run: {again}")
    runs = JobFolder(args.sweep_dir / "*").wandb / OFFLINE_RUNS
    print(f"offline runs upload first with: wandb sync {runs}")
    return 0


def _local(sweep_dir: Path, port: int | None) -> int:
    """Serve trackio's dashboard for the sweep until Ctrl-C; its address first, on a line of its own."""
    from grpo_exp.dashboard.local import serve, sweep_runs

    try:
        found = sweep_runs(sweep_dir)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    server, url = serve(found, port)
    print(f"trackio dashboard: {url}", flush=True)
    print(f"  project {found.project}, store {found.store}; the sweep's runs: {', '.join(found.runs)}", flush=True)
    print("  stop it with Ctrl-C", flush=True)
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # taken by sigwait, not by Python's handlers
    try:
        signal.sigwait(stops)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
