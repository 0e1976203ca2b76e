"""``python -m grpo_exp.report SWEEP_DIR``: write (or rewrite) a sweep's report."""

import sys

from grpo_exp.report.compare import main

sys.exit(main())
