"""UCIe die-to-die link between neighbouring cubes: a bandwidth server with latency.

The simulator asks the registry for the server class of each `ucie` link, so a model with
e.g. per-flit overhead can replace this one through `sip.ucie.impl`.
"""

from __future__ import annotations

from kernbench.components.catalog import register
from kernbench.components.fabric import Server


@register("ucie", "ucie_v1")
class UcieLink(Server):
    """A plain reservation server; latency and bandwidth come from `sip.ucie`."""
