"""The contract both front ends target: PE commands, tile plans, tokens and programs.

The compiler's CMDQ lowering and the tl KernelRunner both end in these types; the hardware
executes them without knowing which front end made them.
"""
