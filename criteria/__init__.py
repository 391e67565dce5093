"""Acceptance rules for speculative decoding (pure torch; no model code, no I/O).

Dimension legend used in every docstring and shape comment of this package:

- B: batch (sequences verified together)
- L: draft length (vLLM's ``num_speculative_tokens``; gamma in the primer)
- K: number of MC-dropout heads (paths), DropMatch Eq. (1)-(3)
- V: vocabulary size
- d: hidden size of the target model's final hidden state
- N: a flattened number of positions

Every rule takes one verification round and returns an :class:`criteria.base.AcceptResult`.
Rules are looked up by name in :data:`criteria.registry.CRITERIA`.
"""
