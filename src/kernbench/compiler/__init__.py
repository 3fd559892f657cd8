"""The offline compiler: IR → TileGraph → CMDQ bundle (docs/compiler.md).

`pipeline.compile_graph` runs the passes (quantize, layout, memory, tiling, placement,
tcm_alloc, schedule, emit; one module each, `lower/` for tiling) under the `manager`'s
PassManager, which verifies the IR after every pass that changes it, checks the memory /
TileGraph / TCM / dependency invariants (`checks`) after the passes that produce them,
times each pass and dumps the typed `state.CompileState` on request. The compiler imports
the IR, the ISA (cmdq), the topology and numerics below it; never host, sim_engine or
triton_emu.
"""
