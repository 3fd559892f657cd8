"""The offline compiler: IR → TileGraph → CMDQ bundle (docs/compiler.md)."""
