"""Chip-to-chip link (e.g. Ethernet between two chips): a bandwidth server with latency.

The simulator asks the registry for the server class of each `chip_link` link, so a model
with e.g. packet framing or credit flow control can replace this one through
`system.link.impl`.
"""

from __future__ import annotations

from kernbench.components.catalog import register
from kernbench.components.fabric import Server


@register("chip_link", "chip_link_v1")
class ChipLink(Server):
    """A plain reservation server; latency and bandwidth come from `system.link`."""
