"""The seed study (issue 13): seed 003's published HiCache results beside the simulator's,
with the sweeps that explain the differences. Run: ``python -m sim.seed_study``."""
