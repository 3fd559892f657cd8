"""Numerics: the one home of number formats and the math on them.

One interned DType table (bits, not bytes), quantization math (quantize, dequantize,
requantize, int4 packing), the numpy kernels shared by the IR reference interpreter and the
hardware's data pass, and the comparison used by every verification. This layer imports
nothing else of kernbench, so both the compiler half and the hardware half can stand on it.
"""
