"""A sweep of jobs: the process launcher and its GPU packing, successive halving, the Hydra callbacks
that end a sweep (its report, its W&B view, its exit status).
"""
