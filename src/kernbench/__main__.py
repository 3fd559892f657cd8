"""`python -m kernbench`: the `kernbench` console script's command line, the same process
settings and exit codes."""

from kernbench.cli import run

run()
