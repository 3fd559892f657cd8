"""Topology configuration: typed, unit-suffixed, validated.

Every field carries its unit in its name (`_ns`, `_gbs` = GB/s = bytes per ns, `_kib`,
`_gib`, `_ghz`, `_cycles`, `_bytes`) and a help line. Unknown keys are errors
(`extra="forbid"`), so a typo in a YAML file or a `--set` path never passes silently.

The shape of a system: `system` (optional: N chips, each one SIP, joined by chip-to-chip
links in a line, ring, 2-D mesh or 2-D torus), `sip` (how many SIPs and how their cubes are
laid out, the UCIe links between cubes) and `cube` (the router mesh, where PEs sit, the HBM controller, the
optional shared SRAM, the command processor M_CPU, and the PE template instantiated once
per PE). Each hardware block is a component spec with `kind` and `impl`; `impl` picks the
timing model from the component registry (see kernbench.components.registry). Each spec
also carries its energy and area parameters (kernbench.config.energy, docs/energy.md); no
timing model reads them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kernbench.config.energy import (
    ChipLinkEnergy,
    HbmCtrlEnergy,
    MCpuEnergy,
    PeCpuEnergy,
    PeDmaEnergy,
    PeFetchStoreEnergy,
    PeGemmEnergy,
    PeMathEnergy,
    PeMmuEnergy,
    PeSchedulerEnergy,
    PeTcmEnergy,
    RouterEnergy,
    SharedSramEnergy,
    UcieEnergy,
)

ROUTER_NAME = re.compile(r"^r(\d+)c(\d+)$")


# Size limits of a topology (docs/errors.md): a larger system is refused at load time,
# before anything is built (building a 10^6-router mesh would take minutes and gigabytes).
MAX_PES = 8192
MAX_ROUTERS = 16384
MAX_ENGINES_PER_PE = 64


class _Strict(BaseModel):
    # allow_inf_nan=False: `.inf` / `nan` as a latency or bandwidth is refused here, once,
    # instead of crashing (or silently never finishing) deep in the simulator
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True,
                              allow_inf_nan=False)


class ComponentSpec(_Strict):
    """A hardware block: its kind, the timing model implementing it, and its parameters."""

    kind: str = Field(description="what the block is (pe_gemm, router, ...)")
    impl: str = Field(description="registered timing model for this kind")
    queue_depth: int = Field(4, ge=1, description="inbox capacity = hardware queue depth (entries)")
    clock_ghz: float = Field(1.0, gt=0, description="engine clock (GHz); cycles = ns × clock_ghz")


# ---------------------------------------------------------------- PE template components


class PeCpuSpec(PeCpuEnergy, ComponentSpec):
    kind: Literal["pe_cpu"] = "pe_cpu"
    impl: str = "pe_cpu_v1"
    dispatch_latency_cycles: int = Field(2, ge=0, description="command decode → scheduler (cycles)")


class PeSchedulerSpec(PeSchedulerEnergy, ComponentSpec):
    kind: Literal["pe_scheduler"] = "pe_scheduler"
    impl: str = "pe_scheduler_v2"
    queue_depth: int = Field(16, ge=1, description="SubmissionQueue depth (commands)")
    dispatch_latency_cycles: int = Field(1, ge=0, description="plan generation per command (cycles)")
    shared_compute_slot: bool = Field(
        False,
        description="GEMM and MATH share one compute slot (no GEMM ∥ MATH overlap)",
    )
    max_transfer_bytes: int = Field(
        0, ge=0, description="A DMA stage larger than this is split into transfers "
                             "of at most this many bytes (0 = no limit)")


class PeDmaSpec(PeDmaEnergy, ComponentSpec):
    kind: Literal["pe_dma"] = "pe_dma"
    impl: str = "pe_dma_v1"
    burst_bytes: int = Field(64, ge=1, description="transfer granularity (bytes); sizes round up")
    setup_cycles: int = Field(8, ge=0, description="descriptor setup per transfer (cycles)")
    hbm_read_bytes_per_cycle: float | None = Field(
        None, gt=0, description="a core's own ceiling on reading HBM / DRAM (bytes per DMA "
                                "clock cycle): the rate its reader reaches issuing tile-sized "
                                "reads and waiting for each block; null: only the links, "
                                "ports and channels on the path limit a read")


class PeFetchStoreSpec(PeFetchStoreEnergy, ComponentSpec):
    kind: Literal["pe_fetch_store"] = "pe_fetch_store"
    impl: str = "pe_fetch_store_v1"
    register_file_kib: int = Field(256, ge=1, description="register file capacity (KiB)")


class PeGemmSpec(PeGemmEnergy, ComponentSpec):
    kind: Literal["pe_gemm"] = "pe_gemm"
    impl: str = "pe_gemm_v1"
    rows: int = Field(32, ge=1, description="systolic array rows (PEs)")
    cols: int = Field(32, ge=1, description="systolic array columns (PEs)")
    dataflow: Literal["ws", "os", "is"] = Field("os", description="weight/output/input stationary")
    count: int = Field(1, ge=1, le=MAX_ENGINES_PER_PE,
                       description="tensor engines per PE (te_id range)")
    throughput_factor: dict[int, float] = Field(
        default_factory=lambda: {2: 2.0, 4: 2.0, 8: 1.0, 16: 1.0, 32: 0.25},
        description="MACs per cell per cycle by operand bitwidth (max of W and A bits)",
    )
    depth: int = Field(
        1, ge=1, description="inner-dimension elements each cell reduces per cycle (1 for a "
                             "systolic array; the dot-product depth of a tile engine)")
    math_fidelity: Literal["LoFi", "HiFi2", "HiFi3", "HiFi4"] = Field(
        "LoFi", description="passes over the operand mantissas per product (LoFi 1 ... "
                            "HiFi4 4); every pass costs one full-rate issue")
    tile_issue_cycles: float = Field(
        0.0, ge=0, description="tile_fpu_v1: fixed cycles per 32 x 32 x 32 tile product "
                               "(issue, pack / accumulate bookkeeping); 0: none")
    unpack_bytes_per_cycle: float | None = Field(
        None, gt=0, description="tile_fpu_v1: rate the unpacker moves an operand tile "
                                "(32 x 32 at the operand bits) into the engine; a tile "
                                "product takes at least that long. null: not limiting")
    stream_dst_tiles: int | None = Field(
        None, ge=1, description="tile_fpu_v1: the unpacker and packer move a GEMM's operands "
                                "and results through the TCM port beside the math, in chunks "
                                "of this many 32 x 32 output tiles (the destination register's "
                                "half that math and packer swap); only the first chunk's "
                                "fetch and the last chunk's store are outside the math. "
                                "null: fetch, math and store run one after another")

    @model_validator(mode="after")
    def _factors_positive(self) -> PeGemmSpec:
        for bits, f in self.throughput_factor.items():
            if f <= 0:
                raise ValueError(f"throughput_factor[{bits}] must be > 0")
        return self


#: issues per product by math fidelity (tt-metal tech_reports/matrix_engine: LoFi full
#: rate, HiFi2 half, HiFi3 a third, HiFi4 a quarter)
FIDELITY_PHASES: dict[str, int] = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}


DEFAULT_MATH_OP_CYCLES: dict[str, float] = {
    # cycles per element per lane (vector passes included), by operation
    "add": 1.0, "sub": 1.0, "mul": 1.0, "div": 4.0, "max": 1.0, "min": 1.0, "where": 1.0,
    "copy": 1.0, "transpose": 1.0, "cast": 1.0, "quantize": 2.0, "requantize": 2.0,
    "dequantize": 2.0,
    "exp": 4.0, "exp2": 4.0, "log": 4.0, "log2": 4.0, "sqrt": 4.0, "rsqrt": 4.0,
    "sigmoid": 5.0, "tanh": 5.0, "erf": 5.0, "gelu": 8.0, "silu": 6.0,
    "sum": 1.0, "reduce_max": 1.0, "reduce_min": 1.0,
    "softmax": 7.0, "layernorm": 6.0, "rmsnorm": 4.0, "rope": 3.0,
}


class PeMathSpec(PeMathEnergy, ComponentSpec):
    kind: Literal["pe_math"] = "pe_math"
    impl: str = "pe_math_v1"
    lanes: int = Field(64, ge=1, description="SIMD lanes (elements per cycle for a 1-cycle op)")
    count: int = Field(1, ge=1, le=MAX_ENGINES_PER_PE,
                       description="vector engines per PE (ve_id range)")
    pipeline_latency_cycles: int = Field(4, ge=0, description="fill latency per vector op (cycles)")
    op_cycles: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_MATH_OP_CYCLES),
        description="cost table: cycles per element per lane, by op name; an override "
                    "names only the ops it changes (merged over the defaults)",
    )

    @field_validator("op_cycles", mode="before")
    @classmethod
    def _merge_op_cycles(cls, v: Any) -> Any:
        # a partial table must not wipe the defaults (every op needs a cost)
        return {**DEFAULT_MATH_OP_CYCLES, **v} if isinstance(v, dict) else v


class PeTcmSpec(PeTcmEnergy, ComponentSpec):
    kind: Literal["pe_tcm"] = "pe_tcm"
    impl: str = "pe_tcm_v1"
    capacity_kib: int = Field(2048, ge=1, description="TCM capacity (KiB)")
    banks: int = Field(8, ge=1, description="banks; a bank is capacity / banks bytes")
    bw_gbs: float = Field(512.0, gt=0, description="port bandwidth shared by DMA and fetch/store")
    latency_ns: float = Field(1.0, gt=0, description="access latency (ns)")
    reserved_kib: int = Field(
        512, ge=0, description="SchedulerReservedTCM (top of TCM): staging for composite tiles"
    )
    port_interleave: bool = Field(
        False, description="the port is shared packet by packet: a transfer fed "
        "slower than the port holds it only for its bytes at the port's rate")

    @model_validator(mode="after")
    def _partition(self) -> PeTcmSpec:
        cap = self.capacity_kib * 1024
        if cap % self.banks:
            raise ValueError(f"capacity_kib {self.capacity_kib} is not divisible into {self.banks} banks")
        if self.reserved_kib >= self.capacity_kib:
            raise ValueError("reserved_kib must leave an allocatable region")
        if (self.reserved_kib * 1024) % (cap // self.banks):
            raise ValueError("reserved_kib must be a whole number of banks")
        return self


class PeMmuSpec(PeMmuEnergy, ComponentSpec):
    kind: Literal["pe_mmu"] = "pe_mmu"
    impl: str = "pe_mmu_v1"
    translation_latency_ns: float = Field(0.0, ge=0, description="per-access translation cost")


class PeTemplate(_Strict):
    """The PE, instantiated once per entry of cube.pe_layout."""

    pe_cpu: PeCpuSpec = PeCpuSpec()
    pe_scheduler: PeSchedulerSpec = PeSchedulerSpec()
    pe_dma: PeDmaSpec = PeDmaSpec()
    pe_fetch_store: PeFetchStoreSpec = PeFetchStoreSpec()
    pe_gemm: PeGemmSpec = PeGemmSpec()
    pe_math: PeMathSpec = PeMathSpec()
    pe_tcm: PeTcmSpec = PeTcmSpec()
    pe_mmu: PeMmuSpec = PeMmuSpec()


# ---------------------------------------------------------------- cube-level components


class MeshSpec(_Strict):
    rows: int = Field(2, ge=1, description="router rows")
    cols: int = Field(2, ge=1, description="router columns")


class RouterSpec(RouterEnergy, ComponentSpec):
    kind: Literal["router"] = "router"
    impl: str = "router_xy_v1"
    hop_latency_ns: float = Field(2.0, gt=0, description="router traversal + wire, per hop (ns)")
    link_bw_gbs: float = Field(128.0, gt=0, description="bandwidth of each mesh link, per direction")


class HbmCtrlSpec(HbmCtrlEnergy, ComponentSpec):
    kind: Literal["hbm_ctrl"] = "hbm_ctrl"
    impl: str = "hbm_v1"
    channels: int = Field(8, ge=1, description="independent channels")
    channel_bw_gbs: float = Field(32.0, gt=0, description="bandwidth per channel (GB/s)")
    latency_ns: float = Field(80.0, gt=0, description="access latency (ns)")
    capacity_gib: float = Field(16.0, gt=0, description="capacity of this cube's HBM (GiB)")
    interleave_bytes: int = Field(256, ge=1, description="address interleave across channels")
    attach: list[str] | Literal["all"] = Field(
        "all", description="routers with a port to the HBM controller ('all' or names)"
    )
    port_bw_gbs: float = Field(256.0, gt=0, description="router ↔ controller port bandwidth")
    port_latency_ns: float = Field(1.0, gt=0, description="router ↔ controller port latency")
    channel_routers: list[str] | None = Field(
        None, description="per-channel NoC endpoints: channel i has its own port "
        "at router channel_routers[i], and a PE's DMA moves each channel's share of a range "
        "over that channel's port and route; None: every access enters at the nearest "
        "`attach` router")


class SharedSramSpec(SharedSramEnergy, ComponentSpec):
    kind: Literal["shared_sram"] = "shared_sram"
    impl: str = "sram_v1"
    capacity_kib: int = Field(4096, ge=1, description="capacity (KiB)")
    bw_gbs: float = Field(256.0, gt=0, description="bandwidth (GB/s)")
    latency_ns: float = Field(10.0, gt=0, description="access latency (ns)")
    router: str = Field("r0c0", description="router the SRAM hangs off")


class MCpuSpec(MCpuEnergy, ComponentSpec):
    kind: Literal["m_cpu"] = "m_cpu"
    impl: str = "m_cpu_v1"
    router: str = Field("r0c0", description="router the command processor sits on")
    issue_window: int = Field(1024, ge=1, description="entries fetched and not yet complete")
    issue_latency_cycles: int = Field(1, ge=0, description="fetch + decode + issue (cycles/entry)")
    command_bytes: int = Field(64, ge=1, description="size of a command / completion packet")
    command_vc: bool = Field(
        False, description="command and completion packets travel on their own virtual "
        "channel of every link: they never queue behind data transfers")


class CubeLinks(_Strict):
    pe_router_bw_gbs: float = Field(128.0, gt=0, description="PE ↔ its router (GB/s)")
    pe_router_latency_ns: float = Field(1.0, gt=0, description="PE ↔ its router (ns)")


class CubeSpec(_Strict):
    mesh: MeshSpec = MeshSpec()
    pe_layout: list[str] = Field(
        default_factory=lambda: ["r0c0", "r0c1", "r1c0", "r1c1"],
        description="PE i sits on router pe_layout[i]",
    )
    router: RouterSpec = RouterSpec()
    hbm_ctrl: HbmCtrlSpec = HbmCtrlSpec()
    shared_sram: SharedSramSpec | None = None
    m_cpu: MCpuSpec = MCpuSpec()
    pe_template: PeTemplate = PeTemplate()
    links: CubeLinks = CubeLinks()

    @model_validator(mode="after")
    def _references(self) -> CubeSpec:
        def check(name: str, where: str) -> None:
            m = ROUTER_NAME.match(name)
            if not m:
                raise ValueError(f"{where}: '{name}' is not a router name (r<row>c<col>)")
            r, c = int(m.group(1)), int(m.group(2))
            if r >= self.mesh.rows or c >= self.mesh.cols:
                raise ValueError(
                    f"{where}: router '{name}' is not in the {self.mesh.rows}x{self.mesh.cols} mesh"
                )

        if not self.pe_layout:
            raise ValueError("pe_layout: a cube needs at least one PE")
        for i, r in enumerate(self.pe_layout):
            check(r, f"pe_layout[{i}]")
        check(self.m_cpu.router, "m_cpu.router")
        if self.shared_sram is not None:
            check(self.shared_sram.router, "shared_sram.router")
        if self.hbm_ctrl.attach != "all":
            if not self.hbm_ctrl.attach:
                raise ValueError("hbm_ctrl.attach: at least one router")
            for i, r in enumerate(self.hbm_ctrl.attach):
                check(r, f"hbm_ctrl.attach[{i}]")
        if self.hbm_ctrl.channel_routers is not None:
            cr = self.hbm_ctrl.channel_routers
            if len(cr) != self.hbm_ctrl.channels:
                raise ValueError(f"hbm_ctrl.channel_routers: {len(cr)} routers for "
                                 f"{self.hbm_ctrl.channels} channels (one per channel)")
            for i, r in enumerate(cr):
                check(r, f"hbm_ctrl.channel_routers[{i}]")
        return self


class GridSpec(_Strict):
    rows: int = Field(1, ge=1, description="cube rows in a SIP")
    cols: int = Field(1, ge=1, description="cube columns in a SIP")


class UcieSpec(UcieEnergy, ComponentSpec):
    kind: Literal["ucie"] = "ucie"
    impl: str = "ucie_v1"
    latency_ns: float = Field(20.0, gt=0, description="die-to-die latency (ns)")
    bw_gbs: float = Field(256.0, gt=0, description="bandwidth per direction (GB/s)")


class SipSpec(_Strict):
    count: int = Field(1, ge=1, description="SIPs in the system")
    cubes: GridSpec = GridSpec()
    ucie: UcieSpec = UcieSpec()


#: chip arrangements of a `system:` section → (2-D, wrap-around links)
ARRANGEMENTS: dict[str, tuple[bool, bool]] = {
    "line": (False, False), "ring": (False, True), "mesh2d": (True, False),
    "torus2d": (True, True)}


class ChipLinkSpec(ChipLinkEnergy, ComponentSpec):
    """The chip-to-chip links between neighbouring chips (e.g. Ethernet between Wormhole
    chips): each neighbour pair is joined by `links_per_pair` full-duplex links, each a
    directed bandwidth server per direction."""

    kind: Literal["chip_link"] = "chip_link"
    impl: str = "chip_link_v1"
    bw_gbs: float = Field(12.5, gt=0, description="bandwidth of one link, per direction (GB/s)")
    latency_ns: float = Field(711.0, gt=0, description="one hop chip to chip: port, wire and "
                                                       "the far port (ns)")
    links_per_pair: int = Field(1, ge=1, le=16, description="parallel links joining each "
                                                            "neighbour pair of chips")
    cube: int = Field(0, ge=0, description="cube (index inside its chip) whose router the "
                                           "chip's links attach to")
    router: str = Field("r0c0", description="router of that cube the chip's links attach to")
    packet_payload_bytes: int = Field(
        0, ge=0, description="payload of one fabric packet (bytes): a transfer crosses the "
                             "link as packets of at most this many bytes, each framed as the "
                             "next three keys say; 0: no framing, the link carries raw bytes "
                             "(the three keys are then unused)")
    packet_header_bytes: int = Field(0, ge=0, description="fabric header in front of each "
                                                          "packet's payload (bytes)")
    frame_max_bytes: int = Field(1500, ge=1, description="largest link-layer frame (bytes): a "
                                                         "packet with its header is cut into "
                                                         "frames of at most this size")
    frame_overhead_bytes: int = Field(0, ge=0, description="link-layer bytes each frame adds "
                                                           "on the wire: headers, FEC, CRC "
                                                           "(bytes)")
    ring_flow_control_ns: float = Field(0.0, ge=0, description="link time each full fabric "
        "packet adds when the chip fabric is configured as a ring: deadlock avoidance (ns per "
        "packet); 0: a line fabric. Needs packet_payload_bytes > 0 (packets to count)")

    @model_validator(mode="after")
    def _flow_control_counts_packets(self) -> ChipLinkSpec:
        if self.ring_flow_control_ns > 0 and self.packet_payload_bytes == 0:
            raise ValueError("ring_flow_control_ns > 0 is a cost per packet: set packet_payload_bytes")
        return self


class SystemSpec(_Strict):
    """Many chips: `chips` SIPs arranged as a line, a ring, a 2-D mesh or a 2-D torus."""

    chips: int = Field(1, ge=1, le=1024, description="chips (SIPs) in the system")
    arrangement: Literal["line", "ring", "mesh2d", "torus2d"] = Field(
        "line", description="how the chips are joined: line, ring, mesh2d, torus2d")
    shape: list[int] | None = Field(
        None, description="[rows, cols] of chips for mesh2d / torus2d (rows × cols = chips); "
                          "null: the most square factorisation, rows ≤ cols")
    link: ChipLinkSpec = ChipLinkSpec()

    @model_validator(mode="after")
    def _shape(self) -> SystemSpec:
        two_d, _ = ARRANGEMENTS[self.arrangement]
        if self.shape is None:
            return self
        if not two_d:
            raise ValueError(f"shape is given for a '{self.arrangement}' arrangement; only "
                             "mesh2d and torus2d take [rows, cols]")
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape {self.shape} is not [rows, cols] of positive integers")
        if self.shape[0] * self.shape[1] != self.chips:
            raise ValueError(f"shape {self.shape} holds {self.shape[0] * self.shape[1]} chips, "
                             f"but chips is {self.chips}")
        return self

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, cols) of chips: 1 × chips for a line or ring; `shape` or the most square
        factorisation (rows ≤ cols) for 2-D."""
        two_d, _ = ARRANGEMENTS[self.arrangement]
        if not two_d:
            return 1, self.chips
        if self.shape is not None:
            return self.shape[0], self.shape[1]
        rows = max(r for r in range(1, int(self.chips ** 0.5) + 1) if self.chips % r == 0)
        return rows, self.chips // rows

    @property
    def wraps(self) -> bool:
        """Whether the last chip of a row / column links back to the first."""
        return ARRANGEMENTS[self.arrangement][1]


class TopologyConfig(_Strict):
    """The whole system. Load with kernbench.config.load_topology_config."""

    name: str = Field("custom", description="preset or user name, shown in reports")
    system: SystemSpec | None = Field(
        None, description="many chips joined by chip-to-chip links (null: one chip); "
                          "system.chips sets sip.count")
    sip: SipSpec = SipSpec()
    cube: CubeSpec = CubeSpec()

    @model_validator(mode="before")
    @classmethod
    def _chips_are_sips(cls, data: Any) -> Any:
        # a chip is one SIP: system.chips is the SIP count, so every reader of sip.count
        # (address map, area, drawing) sees the chips
        if not isinstance(data, dict) or not isinstance(data.get("system"), dict):
            return data
        chips = data["system"].get("chips", 1)
        sip = data.get("sip")
        sip = dict(sip) if isinstance(sip, dict) else {}
        count = sip.get("count", 1)
        if count not in (1, chips) and isinstance(chips, int):
            raise ValueError(f"sip.count {count} differs from system.chips {chips}: with a "
                             "system section, give the chips there only")
        sip["count"] = chips
        return {**data, "sip": sip}

    @model_validator(mode="after")
    def _chip_link_port(self) -> TopologyConfig:
        if self.system is None:
            return self
        link = self.system.link
        cubes = self.sip.cubes.rows * self.sip.cubes.cols
        if link.cube >= cubes:
            raise ValueError(f"system.link.cube {link.cube} is not a cube of a chip "
                             f"({cubes} cube(s) per chip)")
        m = ROUTER_NAME.match(link.router)
        mesh = self.cube.mesh
        if not m or int(m.group(1)) >= mesh.rows or int(m.group(2)) >= mesh.cols:
            raise ValueError(f"system.link.router '{link.router}' is not a router of the "
                             f"{mesh.rows}x{mesh.cols} mesh")
        return self

    @model_validator(mode="after")
    def _size_limits(self) -> TopologyConfig:
        cubes = self.sip.count * self.sip.cubes.rows * self.sip.cubes.cols
        routers = cubes * self.cube.mesh.rows * self.cube.mesh.cols
        pes = cubes * len(self.cube.pe_layout)
        if routers > MAX_ROUTERS:
            raise ValueError(f"{routers} routers in the system (sip.count × cube grid × mesh); "
                             f"the limit is {MAX_ROUTERS}")
        if pes > MAX_PES:
            raise ValueError(f"{pes} PEs in the system; the limit is {MAX_PES}")
        return self
