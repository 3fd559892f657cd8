"""A paged KV cache: fixed-size blocks of `block_tokens` tokens, handed out per sequence.

A sequence holding `n` cached tokens owns ceil(n / block_tokens) blocks (vLLM's paging:
no fragmentation beyond each sequence's last block). `capacity_blocks(...)` derives the
number of blocks from the topology: (HBM bytes − weight bytes) × fraction, divided by the
bytes of one block (`block_tokens` × the model's KV bytes per token, every layer, K and V).
"""

from __future__ import annotations

from kernbench.errors import InputError


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


def capacity_blocks(hbm_bytes: int, weight_bytes: int, kv_bytes_per_token: int,
                    block_tokens: int, fraction: float, where: str = "the topology") -> int:
    """Blocks that fit in `fraction` of the HBM the weights leave; InputError when the
    weights alone do not fit (`where` names the memory: the system's, or one chip's)."""
    if block_tokens < 1:
        raise InputError(f"must be >= 1, got {block_tokens}", field="--block-tokens")
    free = hbm_bytes - weight_bytes
    if free <= 0:
        raise InputError(f"the weights ({weight_bytes / 2**30:.2f} GiB) leave no room for a "
                         f"KV cache in the {hbm_bytes / 2**30:g} GiB of HBM of {where} (a "
                         "larger topology, or a multi-chip one with a policy that is not "
                         "disaggregated)", field="--topology")
    return int(free * fraction) // (block_tokens * kv_bytes_per_token)


class PagedKvCache:
    """Block accounting: `grow(seq_id, tokens)` makes a sequence own the blocks for
    `tokens` cached tokens (False, and nothing changes, when too few are free);
    `free(seq_id)` gives all of them back."""

    def __init__(self, blocks: int, block_tokens: int) -> None:
        if block_tokens < 1:
            raise InputError(f"must be >= 1, got {block_tokens}", field="--block-tokens")
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.used = 0
        self._owned: dict[int, int] = {}

    def need(self, seq_id: int, tokens: int) -> int:
        """More blocks `seq_id` needs to hold `tokens` tokens (0 if it has them)."""
        return max(0, blocks_for(tokens, self.block_tokens) - self._owned.get(seq_id, 0))

    def fits(self, seq_id: int, tokens: int) -> bool:
        return self.need(seq_id, tokens) <= self.blocks - self.used

    def grow(self, seq_id: int, tokens: int) -> bool:
        n = self.need(seq_id, tokens)
        if n > self.blocks - self.used:
            return False
        if n:
            self._owned[seq_id] = self._owned.get(seq_id, 0) + n
            self.used += n
        return True

    def free(self, seq_id: int) -> None:
        self.used -= self._owned.pop(seq_id, 0)

    def owned(self, seq_id: int) -> int:
        return self._owned.get(seq_id, 0)
