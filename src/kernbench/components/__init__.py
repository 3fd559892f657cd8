"""Hardware components: the timing models the simulator wires together.

`base` (ComponentBase with the op-log hooks, PeEngineBase with inboxes sized to
the queue depth and token routing), `ports` (declared, typed ports and the
SimContext protocol the simulator implements), `fabric` (links, ports and memories as
reservation servers), `actions` (the action ledger energy is priced from), `counters`
(typed counter snapshots for stats), `registry`/`catalog` (kind + impl → class, extended
through the `kernbench.components` entry-point group) and `builtin/` (one file per kind).
Never imports ir, cmdq, compiler, host or triton_emu.

`fabric` may be installed compiled (setup.py builds it with mypyc where it can): the
same source as a C extension beside `fabric.py`. `native.choose_fabric` runs the source
instead when KERNBENCH_PURE_PYTHON is set or when the extension was built from another
source (edited since the last build); either way the results are the same.
"""

from kernbench.components.native import choose_fabric

choose_fabric()
