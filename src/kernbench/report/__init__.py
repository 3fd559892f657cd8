"""Reports: stats.json, Perfetto trace, plots, HTML."""
