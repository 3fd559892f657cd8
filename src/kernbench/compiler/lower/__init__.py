"""The tiling of the IR into tile operations (the TileGraph), in two passes.

`plan_pass.Plan` makes the decisions that span several ops into a frozen
`plan.LoweringPlan` in the compile state; `tile_pass.Tile` lowers each op, reading that
plan. The modules are layered (tests/test_layering.py): plain helpers and value types
(`values`, `plan`, `placement`, ...), the builder `context`, the tile emitters, the per-op
lowerings, the two passes. This file imports nothing, so importing a value type does not
import the passes.
"""
