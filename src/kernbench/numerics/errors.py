"""The one error a numerics kernel raises for parameters it cannot honour.

Callers turn it into their own error with context: the IR interpreter into an
InputError naming the node, the data pass into a DataError naming the op record.
"""

from __future__ import annotations


class KernelError(ValueError):
    """A kernel's parameters or input shapes are invalid for it."""
