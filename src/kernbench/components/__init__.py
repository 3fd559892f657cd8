"""Hardware components: the timing models the simulator wires together.

`base` (ComponentBase with the op-log hooks, PeEngineBase with inboxes sized to
the queue depth and token routing), `ports` (declared, typed ports and the
SimContext protocol the simulator implements), `fabric` (links, ports and memories as
reservation servers), `actions` (the action ledger energy is priced from), `counters`
(typed counter snapshots for stats), `registry`/`catalog` (kind + impl → class, extended
through the `kernbench.components` entry-point group) and `builtin/` (one file per kind).
Never imports ir, cmdq, compiler, host or triton_emu.

The modules that run per command (`kernbench.native.NATIVE`) may be installed compiled
(setup.py builds them with mypyc where it can; `kernbench.native` decides which runs);
either way the results are the same.
"""
