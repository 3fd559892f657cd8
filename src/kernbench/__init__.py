"""kernbench: an NPU simulator and offline compiler.

Layers (each imports only the ones above it in this list):
config → topology → sim_engine → components → common → cmdq / ir → compiler →
triton_emu → data → report → cli.
"""

__version__ = "0.1.0"
