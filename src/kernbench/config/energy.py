"""Energy and area parameters of each component kind (docs/energy.md).

Mixed into the component specs of kernbench.config.schema, so every key lives where the
component lives and is overridden like any other (`--set cube.hbm_ctrl.energy_pj_per_byte=20`).
Units are in the names: `_pj_per_<action>` (picojoules per counted action), `_mw` (static
power, milliwatts; mW × ns = pJ), `_mm2` / `_um2` (area), `_per_mib` (per MiB of capacity).

Defaults are for a 7 nm process. Each one's derivation and source is in docs/energy.md:
logic and SRAM energies are Horowitz (ISSCC 2014, 45 nm, 0.9 V) × 0.25; logic areas are
Horowitz's × 0.05; SRAM area is TSMC's 7 nm 256 Mib test chip; HBM is ~3.9 pJ/bit (HBM2
class); UCIe 2.5D (advanced package) is 0.25 pJ/bit. No timing model reads any of these
fields: energy and area are priced after the run from the action counts it recorded.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


def _static(mw: float) -> float:
    return Field(mw, ge=0, description="static (leakage + clock tree) power per instance (mW)")


def _area(mm2: float) -> float:
    return Field(mm2, ge=0, description="silicon area per instance (mm²)")


class PeCpuEnergy(BaseModel):
    static_power_mw: float = _static(1.0)
    area_mm2: float = _area(0.05)


class PeSchedulerEnergy(BaseModel):
    static_power_mw: float = _static(0.5)
    area_mm2: float = _area(0.01)


class PeDmaEnergy(BaseModel):
    static_power_mw: float = _static(0.5)
    area_mm2: float = _area(0.02)


class PeMmuEnergy(BaseModel):
    static_power_mw: float = _static(0.2)
    area_mm2: float = _area(0.01)


class PeGemmEnergy(BaseModel):
    energy_pj_per_mac_int4: float = Field(
        0.025, ge=0, description="one MAC with operands ≤ 4 bits (pJ)")
    energy_pj_per_mac_int8: float = Field(
        0.075, ge=0, description="one MAC with operands of 5..8 bits (pJ)")
    energy_pj_per_mac_fp16: float = Field(
        0.5, ge=0, description="one MAC with 16-bit operands, fp16 / bf16 (pJ)")
    energy_pj_per_mac_fp32: float = Field(
        1.15, ge=0, description="one MAC with 32-bit operands, fp32 (pJ)")
    static_power_mw: float = _static(8.0)
    area_um2_per_cell: float = Field(
        300.0, ge=0, description="area of one multi-precision MAC cell of the array (µm²)")


class PeMathEnergy(BaseModel):
    energy_pj_per_lane_cycle: float = Field(
        0.375, ge=0, description="one SIMD lane busy for one cycle (pJ)")
    static_power_mw: float = _static(2.5)
    area_um2_per_lane: float = Field(200.0, ge=0, description="area of one SIMD lane (µm²)")


class PeFetchStoreEnergy(BaseModel):
    energy_pj_per_byte_rf_write: float = Field(
        0.3125, ge=0, description="register file write, per byte fetched from TCM (pJ)")
    energy_pj_per_byte_rf_read: float = Field(
        0.3125, ge=0, description="register file read, per byte stored to TCM (pJ)")
    static_power_mw: float = _static(2.0)
    area_mm2_per_mib: float = Field(
        5.3, ge=0, description="register file area per MiB of capacity (mm²/MiB)")


class PeTcmEnergy(BaseModel):
    energy_pj_per_byte_read: float = Field(
        1.64, ge=0, description="TCM read, per byte leaving the TCM port (pJ)")
    energy_pj_per_byte_write: float = Field(
        1.64, ge=0, description="TCM write, per byte entering the TCM port (pJ)")
    static_power_mw: float = _static(6.0)
    area_mm2_per_mib: float = Field(1.33, ge=0, description="SRAM area per MiB (mm²/MiB)")


class RouterEnergy(BaseModel):
    energy_pj_per_byte_hop: float = Field(
        0.8, ge=0, description="one byte over one router-to-router mesh link: router + wire (pJ)")
    energy_pj_per_byte_port: float = Field(
        0.3, ge=0, description="one byte over a local port link (PE, M_CPU, HBM or SRAM "
                               "↔ router) (pJ)")
    static_power_mw: float = _static(1.0)
    area_mm2_per_port: float = Field(
        0.01, ge=0, description="router area per port (mesh neighbours + local ports) (mm²)")


class HbmCtrlEnergy(BaseModel):
    energy_pj_per_byte: float = Field(
        31.2, ge=0, description="HBM access (DRAM core + TSV + PHY), per byte moved (pJ)")
    static_power_mw: float = _static(150.0)
    area_mm2_per_channel: float = Field(
        1.2, ge=0, description="controller + PHY area on the logic die, per channel (mm²)")


class SharedSramEnergy(BaseModel):
    energy_pj_per_byte: float = Field(
        3.125, ge=0, description="shared SRAM access, per byte read or written (pJ)")
    static_power_mw: float = _static(12.0)
    area_mm2_per_mib: float = Field(1.33, ge=0, description="SRAM area per MiB (mm²/MiB)")


class MCpuEnergy(BaseModel):
    static_power_mw: float = _static(5.0)
    area_mm2: float = _area(0.1)


class UcieEnergy(BaseModel):
    energy_pj_per_byte: float = Field(
        2.0, ge=0, description="one byte across a die-to-die link (pJ)")
    static_power_mw: float = Field(
        20.0, ge=0, description="static power per directed link (one TX + RX lane group) (mW)")
    area_mm2_per_gbs: float = Field(
        0.00077, ge=0, description="PHY area per GB/s of a directed link, half on each die "
                                   "(mm² per GB/s)")


def is_energy_or_area_field(name: str) -> bool:
    """Whether a config key is an energy, static-power or area parameter (no timing model
    reads those; two configs that differ only in them time a program identically)."""
    return name.startswith(("energy_", "area_")) or name == "static_power_mw"


def timing_view(data: object) -> object:
    """A config dump (`model_dump()`) without its energy and area parameters."""
    if isinstance(data, dict):
        return {k: timing_view(v) for k, v in data.items()
                if not is_energy_or_area_field(str(k))}
    if isinstance(data, list):
        return [timing_view(v) for v in data]
    return data


class ChipLinkEnergy(BaseModel):
    energy_pj_per_byte: float = Field(
        40.0, ge=0, description="one byte across a chip-to-chip link: SerDes + PHY + MAC "
                                "at both ends (pJ)")
    static_power_mw: float = Field(
        500.0, ge=0, description="static power per directed chip link (one TX + RX lane "
                                 "group) (mW)")
    area_mm2_per_link: float = Field(
        2.0, ge=0, description="PHY + controller area per directed chip link, half on each "
                               "chip (mm²)")
