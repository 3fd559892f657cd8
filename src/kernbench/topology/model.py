"""The node graph a TopologyConfig expands to: ids, links, XY routes, address map.

Node ids are dotted paths: `sip0.cube0.pe3.pe_gemm`, `sip0.cube0.r1c2`,
`sip0.cube0.hbm_ctrl`, `sip0.cube0.m_cpu`. Links are directed (a full-duplex wire is two
links) and carry latency and bandwidth. Wires connect a component's declared port to its
peer (docs/architecture.md "Ports"): the builder is the only place that names them, so no
component ever finds a peer by formatting an id. Nothing here simulates; the engine reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernbench.config.schema import ComponentSpec, TopologyConfig
from kernbench.topology.chips import chip_route

PE_COMPONENTS = (
    "pe_cpu", "pe_scheduler", "pe_dma", "pe_fetch_store", "pe_gemm", "pe_math", "pe_tcm", "pe_mmu",
)


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    kind: str
    impl: str
    spec: ComponentSpec | None
    cube: str     # dotted id of the cube it belongs to ("sip0.cube1")
    pe: str = ""  # dotted id of the PE it belongs to ("sip0.cube0.pe3"), "" outside PEs


@dataclass(frozen=True, slots=True)
class Wire:
    """Port `port` of node `src` is connected to node `dst` (a vector port gets one wire per
    peer, in order). The simulator binds it and checks it against the class's PORTS."""

    src: str
    port: str
    dst: str


@dataclass(frozen=True, slots=True)
class LinkSpec:
    id: str
    src: str
    dst: str
    latency_ns: float
    bw_gbs: float
    kind: str  # "mesh" | "pe" | "hbm_port" | "sram_port" | "ucie" | "chip_link"


@dataclass(frozen=True, slots=True)
class Cube:
    id: str          # "sip0.cube1"
    index: int       # global cube index (address map order)
    sip: int
    row: int         # position in the SIP's cube grid
    col: int
    hbm_base: int    # first HBM byte address owned by this cube
    hbm_bytes: int
    sram_base: int
    sram_bytes: int
    m_cpu: str = ""         # node id of the cube's command processor
    m_cpu_router: str = ""  # router id it is attached to
    hbm_ctrl: str = ""      # node id of the cube's HBM controller
    sram: str = ""          # node id of the shared SRAM ("" when the cube has none)
    sram_router: str = ""


@dataclass(frozen=True, slots=True)
class Pe:
    id: str          # "sip0.cube0.pe3"
    index: int       # global PE index (CMDQ `pe` field)
    cube: Cube
    local: int       # index inside the cube
    router: str      # full router id
    cpu: str = ""    # node id of its PE_CPU (where commands enter)
    tcm: str = ""    # node id of its PE_TCM


@dataclass
class Topology:
    """Expanded hardware: nodes, links, PEs, cubes, and routing helpers."""

    config: TopologyConfig
    nodes: dict[str, Node] = field(default_factory=dict)
    links: dict[str, LinkSpec] = field(default_factory=dict)
    cubes: list[Cube] = field(default_factory=list)
    pes: list[Pe] = field(default_factory=list)
    wires: list[Wire] = field(default_factory=list)
    _route_cache: dict[tuple[str, str, int], tuple[str, ...]] = field(default_factory=dict)

    # ------------------------------------------------------------------ lookups
    @property
    def name(self) -> str:
        return self.config.name

    def pe(self, ref: int | str) -> Pe:
        """A PE by global index or dotted path (`sip0.cube0.pe3`)."""
        if isinstance(ref, int):
            return self.pes[ref]
        for p in self.pes:
            if p.id == ref:
                return p
        raise KeyError(ref)

    def cube_of_hbm(self, addr: int) -> Cube:
        for c in self.cubes:
            if c.hbm_base <= addr < c.hbm_base + c.hbm_bytes:
                return c
        raise KeyError(addr)

    @property
    def hbm_bytes(self) -> int:
        return sum(c.hbm_bytes for c in self.cubes)

    @property
    def sram_bytes(self) -> int:
        return sum(c.sram_bytes for c in self.cubes)

    def router_id(self, cube: Cube, name: str) -> str:
        return f"{cube.id}.{name}"

    # ------------------------------------------------------------------ paths
    def memory_path(self, pe: Pe, mem: str, mem_router: str, write: bool) -> tuple[str, ...]:
        """Link ids between `pe` and memory node `mem` attached at `mem_router`: PE → router
        → mesh → memory port when `write`, the reverse when reading."""
        lane = self.lane_of(pe)
        if write:
            return (link_id(pe.id, pe.router), *self.route(pe.router, mem_router, lane),
                    link_id(mem_router, mem))
        return (link_id(mem, mem_router), *self.route(mem_router, pe.router, lane),
                link_id(pe.router, pe.id))

    def channel_path(self, pe: Pe, cube: Cube, channel: int, write: bool) -> tuple[str, ...]:
        """Link ids between `pe` and HBM channel `channel` of `cube` through that channel's
        own port (`hbm_ctrl.channel_routers`): PE → router → mesh → the
        channel's router → its port when `write`, the reverse when reading."""
        name = self.config.cube.hbm_ctrl.channel_routers[channel]
        rid, ch = f"{cube.id}.{name}", channel_endpoint(cube, channel)
        lane = self.lane_of(pe)
        if write:
            return (link_id(pe.id, pe.router), *self.route(pe.router, rid, lane),
                    link_id(rid, ch))
        return (link_id(ch, rid), *self.route(rid, pe.router, lane), link_id(pe.router, pe.id))

    def lane_of(self, pe: Pe) -> int:
        """The chip link (of the parallel links of a neighbour pair) `pe`'s transfers to
        other chips take: PEs take the lanes in turn by their index inside the chip."""
        system = self.config.system
        if system is None or system.link.links_per_pair == 1:
            return 0
        per_chip = len(self.pes) // system.chips
        return (pe.index % per_chip) % system.link.links_per_pair

    @property
    def chips(self) -> int:
        """Chips (SIPs) in the system: system.chips, or 1 without a system section."""
        return self.config.system.chips if self.config.system is not None else 1

    def chip_of(self, pe: Pe) -> int:
        """The chip (SIP index) `pe` belongs to."""
        return pe.cube.sip

    def command_path(self, cube: Cube, pe: Pe, to_pe: bool) -> tuple[str, ...]:
        """Link ids between `cube`'s M_CPU and `pe` (command out, or completion back). A PE
        on another chip is commanded by its own chip's M_CPU at the same place (each chip's
        command processor runs the program's entries of its own PEs): no command crosses
        a chip link."""
        if cube.sip != pe.cube.sip:
            per_chip = len(self.cubes) // self.chips
            cube = self.cubes[pe.cube.sip * per_chip + cube.index % per_chip]
        m, mr = cube.m_cpu, cube.m_cpu_router
        if to_pe:
            return (link_id(m, mr), *self.route(mr, pe.router), link_id(pe.router, pe.id))
        return (link_id(pe.id, pe.router), *self.route(pe.router, mr), link_id(mr, m))

    def cube(self, cube_id: str) -> Cube:
        """A cube by dotted id (`sip0.cube1`)."""
        return self._cube_by_id(cube_id)

    # ------------------------------------------------------------------ routing
    def route(self, src_router: str, dst_router: str, lane: int = 0) -> tuple[str, ...]:
        """Link ids from one router to another: XY inside a cube, cube-grid XY across cubes,
        and across chips: to the chip's port router, the chip links of the chip-level route
        (parallel link `lane` of each pair), then from the last chip's port router."""
        key = (src_router, dst_router, lane)
        hit = self._route_cache.get(key)
        if hit is not None:
            return hit
        path = tuple(self._route(src_router, dst_router, lane))
        self._route_cache[key] = path
        return path

    def _route(self, src: str, dst: str, lane: int) -> list[str]:
        s_cube, s_r, s_c = split_router(src)
        d_cube, d_r, d_c = split_router(dst)
        if s_cube == d_cube:
            return _xy(s_cube, s_r, s_c, d_r, d_c)
        sc = self._cube_by_id(s_cube)
        dc = self._cube_by_id(d_cube)
        if sc.sip != dc.sip:
            system = self.config.system
            if system is None:
                raise KeyError(f"no route between SIPs ({src} → {dst}): the topology has no "
                               "system section joining its chips")
            path = list(self.route(src, chip_port(self.config, sc.sip)))
            for a, b in chip_route(system, sc.sip, dc.sip):
                path.append(chip_link_id(chip_port(self.config, a), chip_port(self.config, b),
                                         lane))
            return path + list(self.route(chip_port(self.config, dc.sip), dst))
        # cube-level XY: move along columns first, then rows, through gateway routers.
        mesh = self.config.cube.mesh
        path: list[str] = []
        cur = sc
        r, c = s_r, s_c
        while (cur.row, cur.col) != (dc.row, dc.col):
            if cur.col != dc.col:
                step = 1 if dc.col > cur.col else -1
                nxt = self._cube_at(cur.sip, cur.row, cur.col + step)
                gw_r, gw_c = mesh.rows // 2, (mesh.cols - 1 if step > 0 else 0)
                in_r, in_c = gw_r, (0 if step > 0 else mesh.cols - 1)
            else:
                step = 1 if dc.row > cur.row else -1
                nxt = self._cube_at(cur.sip, cur.row + step, cur.col)
                gw_r, gw_c = (mesh.rows - 1 if step > 0 else 0), mesh.cols // 2
                in_r, in_c = (0 if step > 0 else mesh.rows - 1), gw_c
            path += _xy(cur.id, r, c, gw_r, gw_c)
            path.append(f"{cur.id}.r{gw_r}c{gw_c}->{nxt.id}.r{in_r}c{in_c}")
            cur, r, c = nxt, in_r, in_c
        path += _xy(cur.id, r, c, d_r, d_c)
        return path

    def _cube_by_id(self, cid: str) -> Cube:
        for c in self.cubes:
            if c.id == cid:
                return c
        raise KeyError(cid)

    def _cube_at(self, sip: int, row: int, col: int) -> Cube:
        for c in self.cubes:
            if (c.sip, c.row, c.col) == (sip, row, col):
                return c
        raise KeyError((sip, row, col))

    def hbm_router_for(self, src_router: str, cube: Cube) -> str:
        """The router whose HBM port a request from `src_router` uses to reach `cube`'s HBM."""
        attach = self.config.cube.hbm_ctrl.attach
        s_cube, s_r, s_c = split_router(src_router)
        if attach == "all":
            if s_cube == cube.id:
                return src_router
            # enter the destination cube at its gateway: the route's last router is the entry.
            links = self.route(src_router, f"{cube.id}.r0c0")
            entry = _entry_router(links, cube.id) if links else f"{cube.id}.r0c0"
            return entry
        best = None
        for name in attach:
            rid = f"{cube.id}.{name}"
            hops = len(self.route(src_router, rid))
            if best is None or hops < best[0]:
                best = (hops, rid)
        assert best is not None
        return best[1]


def channel_endpoint(cube: Cube, channel: int) -> str:
    """The id a channel's own port links to (`<hbm_ctrl>.ch<i>`)."""
    return f"{cube.hbm_ctrl}.ch{channel}"


def link_id(src: str, dst: str) -> str:
    """The id of the directed link from node `src` to node `dst`."""
    return f"{src}->{dst}"


def chip_port(cfg: TopologyConfig, chip: int) -> str:
    """The router id where chip `chip`'s chip-to-chip links attach."""
    assert cfg.system is not None
    link = cfg.system.link
    return f"sip{chip}.cube{link.cube}.{link.router}"


def chip_link_id(src_port: str, dst_port: str, lane: int = 0) -> str:
    """The id of parallel chip link `lane` from one chip's port router to a neighbour's."""
    return link_id(src_port, dst_port) + (f"#{lane}" if lane else "")


def _entry_router(links: tuple[str, ...], cube_id: str) -> str:
    for lid in links:
        dst = lid.split("->")[1].partition("#")[0]
        if dst.startswith(cube_id + "."):
            return dst
    return f"{cube_id}.r0c0"


def split_router(rid: str) -> tuple[str, int, int]:
    """(cube id, row, column) of a router id `<cube>.r<row>c<col>` (or a bare `r<row>c<col>`:
    cube "")."""
    cube, _, name = rid.rpartition(".")
    r, _, c = name[1:].partition("c")
    return cube, int(r), int(c)


def _xy(cube: str, r: int, c: int, dr: int, dc: int) -> list[str]:
    out = []
    while c != dc:
        nc = c + (1 if dc > c else -1)
        out.append(f"{cube}.r{r}c{c}->{cube}.r{r}c{nc}")
        c = nc
    while r != dr:
        nr = r + (1 if dr > r else -1)
        out.append(f"{cube}.r{r}c{c}->{cube}.r{nr}c{c}")
        r = nr
    return out
