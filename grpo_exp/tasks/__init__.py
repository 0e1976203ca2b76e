"""Verifiable tasks generated on demand: reasoning-gym's procedural problems, each with its own verifier.

``checks`` checks a task and its settings before the model loads; ``problems`` draws training and
held-out problems from disjoint regions of the task's problem space; ``curriculum`` raises a task's
difficulty as the model passes its held-out problems. reasoning-gym is imported only when problems
are drawn or checked.
"""
