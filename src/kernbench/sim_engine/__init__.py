"""The hardware's engine: the SimPy run loop and tracer (pass 1), and the data pass (pass 2):
the op log the component hooks record (plain data, saveable), the byte-addressable
MemoryStore, and the DataExecutor with its math-op registry, all on kernbench.numerics.
It never imports ir, cmdq, compiler, host or triton_emu."""
