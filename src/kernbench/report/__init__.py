"""Reports of a finished run: stats.json (schema in docs/stats.md), the Perfetto trace
(with the power counter track), energy and area pricing, LLM figures, console summaries,
the mesh SVG, plots and the one-page HTML report. Reads simulator counters and plain stats
dicts; never imports ir or compiler.
"""
