"""The sweep report: a sweep's job folders read into tables (``sweep``), ranked with a verdict and
written as Markdown and CSV (``compare``), with figures (``plots``). ``python -m grpo_exp.report DIR``."""
