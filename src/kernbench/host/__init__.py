"""Host: what a driver does around the NPU.

Load a compiled bundle, deploy its weights and inputs into device memory, run it on the
simulator (pass 1 timing, pass 2 data), read the outputs back and verify them against the
IR reference interpreter and onnxruntime; plus the end-to-end flows (compile → simulate →
report) the CLI exposes. Only the CLI, tests and benchmarks import this layer.
"""
