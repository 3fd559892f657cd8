"""Built-in timing models, one file per kind. Importing this package registers them."""

from kernbench.components.builtin import (  # noqa: F401
    chip_link,
    hbm_ctrl,
    m_cpu,
    pe_cpu,
    pe_dma,
    pe_fetch_store,
    pe_gemm,
    pe_math,
    pe_mmu,
    pe_scheduler,
    pe_tcm,
    router,
    sram,
    tile_engine,
    ucie,
)
