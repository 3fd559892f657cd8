"""Parallelism over chips (docs/multichip.md): the graph each rank runs (`tp_graph`) and
the one multi-chip program made of every rank's compiled program with the collectives
between them (`tp_program`)."""

from kernbench.compiler.parallel.tp_graph import ParallelSite, TpGraph, shard_graph

__all__ = ["ParallelSite", "TpGraph", "shard_graph"]
