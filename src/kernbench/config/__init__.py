"""Topology configuration: pydantic schema, bundled presets, overlays and overrides."""

from kernbench.config.load import load_topology_config, preset_names
from kernbench.config.schema import TopologyConfig

__all__ = ["TopologyConfig", "load_topology_config", "preset_names"]
