"""Evaluation analyses of a finished run (seed 001 §6.2, seed 000 §6.1.7), each a command that
writes a markdown table and a PNG into ``<run>/analyses/`` and appears in the run's report.

Like the referee, these are evaluation tools: they read the run's update store (global models,
the attacker's shadow updates, the anonymous updates) and its sealed truth, and replay device
training where a variant needs updates the run did not keep (other layers, smaller priors).
"""
